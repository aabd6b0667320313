-- Version 20. PostgreSQL's migration of this number finds an operation's effects by the
-- operation's `seq`, as this store's version 19 did; SQLite's schema does not change in this version.
SELECT 1;
