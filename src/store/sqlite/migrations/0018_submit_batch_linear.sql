-- Version 18. PostgreSQL's migration of this number makes a batch's submit linear in its size;
-- SQLite's schema does not change in this version.
SELECT 1;
