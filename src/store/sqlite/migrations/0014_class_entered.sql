-- Version 14. How many operations ever entered each class's queue (a submit, a retry, a redrive,
-- a rescue): a count that only grows, kept beside `waiting` in the same statement. A worker idle
-- in another process wakes when it rose (store/sqlite/watch.ts); `waiting` alone cannot tell it,
-- since its own claims lower it without its hearing of them.
ALTER TABLE classes ADD COLUMN entered INTEGER NOT NULL DEFAULT 0;
