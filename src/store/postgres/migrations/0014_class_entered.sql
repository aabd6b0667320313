-- Version 14. SQLite's migration of this number counts the operations that entered each class's
-- queue, so that idle workers in other processes hear of new work; PostgreSQL's workers hear of it
-- by LISTEN/NOTIFY, and its schema does not change.
SELECT 1;
