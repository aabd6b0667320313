-- Version 9. PostgreSQL's migration of this number makes its single submit count itself in with
-- the statement that checks its room; SQLite's submit is code (submit.ts), and its schema does not
-- change.
SELECT 1;
