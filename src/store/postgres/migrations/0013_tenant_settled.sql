-- Version 13. SQLite's migration of this number narrows its index of a tenant's operations by
-- state to the settled states, the form PostgreSQL's `operations_state` has had from version 1;
-- PostgreSQL's schema does not change.
SELECT 1;
