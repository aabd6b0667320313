-- Version 27. Secrets the store keeps for every process that shares the file, made once, here.
-- The first: the key that makes list cursors opaque. A cursor was the operation's `seq` in
-- base64, and `seq` counts every tenant's submits, so a tenant paging its own operations could
-- read how many the whole service accepted in between.
-- Older builds: compatible.
CREATE TABLE secrets (
  name  TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
INSERT INTO secrets (name, value) VALUES ('cursor', lower(hex(randomblob(16))));
