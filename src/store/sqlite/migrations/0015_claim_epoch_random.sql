-- Version 15. PostgreSQL's migration of this number widens the epoch to a bigint, now that a
-- claim advances it by a random step (store/sqlite/claim.ts, the same rule); SQLite's integers are
-- 64-bit already, so its schema does not change.
SELECT 1;
