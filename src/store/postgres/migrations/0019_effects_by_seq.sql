-- Version 19. SQLite's migration of this number finds an operation's effects by the operation's
-- `seq`; PostgreSQL's schema does not change in this version.
SELECT 1;
