-- Version 12. PostgreSQL's migration of this number gives its claim a short way (two statements)
-- for a lone candidate tenant; SQLite's claim is code (claim.ts), and its schema does not change.
SELECT 1;
