-- Version 10. PostgreSQL's migration of this number makes its end of a batch of attempts find,
-- lock and read its operations with one statement; SQLite's finish is code (finish.ts), and its
-- schema does not change.
SELECT 1;
