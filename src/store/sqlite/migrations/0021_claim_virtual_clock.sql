-- Version 21. The class's virtual clock: the latest start tag a claim served (store/sqlite/claim.ts).
-- A tenant found behind it was not backlogged meanwhile and starts from it.
ALTER TABLE classes ADD COLUMN vclock REAL NOT NULL DEFAULT 0;
