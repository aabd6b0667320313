-- Version 24. PostgreSQL's migration of this number locks a batch's budget rows all together, in
-- (key, window_start) order; SQLite has one writer at a time and its schema does not change.
SELECT 1;
