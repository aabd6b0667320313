-- Version 6. PostgreSQL's migration of this number fixes how its functions plan their statements
-- (once per connection, through indexes only); SQLite plans each statement when it is prepared,
-- and its schema does not change.
SELECT 1;
