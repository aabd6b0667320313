-- Set-based hot paths. Nothing to change in SQLite's schema: its batches run item by item inside
-- one transaction, where a statement costs microseconds, not a round trip (store/sqlite/). The
-- number is kept so both drivers' migrations stay in step.
SELECT 1;
