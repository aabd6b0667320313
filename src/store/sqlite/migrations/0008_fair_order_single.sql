-- Version 8. PostgreSQL's migration of this number gives its claim's serving order a short way for
-- a single candidate; SQLite's serving order is code (claim.ts), and its schema does not change.
SELECT 1;
