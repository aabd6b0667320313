-- Version 34. PostgreSQL's migration of this number lets a claim pass over operations on their
-- last chance (one more lease expiry parks them). SQLite's claim is this build's code, which reads
-- the operations' `lease_expiries` as it is; the schema does not change.
-- Older builds: compatible.
SELECT 1;
