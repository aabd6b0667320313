-- Version 16. SQLite's migration of this number keys an operation's attempts by the operation's
-- `seq`; PostgreSQL's schema does not change in this version.
SELECT 1;
