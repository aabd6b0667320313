-- Version 17. PostgreSQL's migration of this number keys its attempts by the operation's `seq`,
-- as this store's version 16 did; SQLite's schema does not change in this version.
SELECT 1;
