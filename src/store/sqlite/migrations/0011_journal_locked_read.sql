-- Version 11. PostgreSQL's migration of this number makes its journal's batch functions find and
-- lock their operations with one statement each; SQLite's journal is code (effects.ts), and its
-- schema does not change.
SELECT 1;
