-- Version 31. PostgreSQL's migration of this number counts a transactional submit's class as a
-- delta, so that the caller's open transaction does not hold the class's counter row. SQLite has
-- one writer at a time: a transaction that submits holds the whole file until it commits, with or
-- without the counter, so the schema does not change.
-- Older builds: compatible.
SELECT 1;
