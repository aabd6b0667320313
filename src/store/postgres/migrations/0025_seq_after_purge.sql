-- Version 25. SQLite's migration of this number keeps a purge from freeing the newest positions
-- for reuse; PostgreSQL's `seq` comes from a sequence, which never goes back, and its schema does
-- not change.
-- Older builds: compatible.
SELECT 1;
