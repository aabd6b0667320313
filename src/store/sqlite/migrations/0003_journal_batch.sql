-- The effect journal in batches. Nothing to change in SQLite's schema: its batches are one
-- transaction with a savepoint per item (store/sqlite/effects.ts). The number is kept so both
-- drivers' migrations stay in step.
SELECT 1;
