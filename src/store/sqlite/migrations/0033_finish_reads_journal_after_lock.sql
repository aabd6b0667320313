-- Version 33. PostgreSQL's migration of this number has an attempt's end read the effect journal
-- after it has locked the operation. SQLite's writes take the database's one write lock before
-- they read, so an end always read the journal a begin left, and the schema does not change.
-- Older builds: compatible.
SELECT 1;
