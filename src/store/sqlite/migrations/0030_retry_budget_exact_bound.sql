-- Version 30. PostgreSQL's migration of this number makes its retry budget count the retry it
-- allows against the bound, as this store's (store/sqlite/retry-budget.ts) now does in code; the
-- schema does not change.
-- Older builds: compatible.
SELECT 1;
