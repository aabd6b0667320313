-- Version 32. PostgreSQL's migration of this number makes a refused submit leave the queue rows as
-- it found them. SQLite checks both caps before it writes anything, so a refusal never wrote a
-- queue row here, and the schema does not change.
-- Older builds: compatible.
SELECT 1;
