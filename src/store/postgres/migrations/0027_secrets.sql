-- Version 27. Secrets the store keeps for every process that shares it, made once, here. The
-- first: the key that makes list cursors opaque. A cursor was the operation's `seq` in base64,
-- and `seq` counts every tenant's submits, so a tenant paging its own operations could read how
-- many the whole service accepted in between. gen_random_uuid draws from the server's strong
-- random source; two of them through md5 make 128 bits of hex.
-- Older builds: compatible.
CREATE TABLE secrets (
  name  text COLLATE "C" PRIMARY KEY,
  value text NOT NULL
);
INSERT INTO secrets (name, value) VALUES ('cursor', md5(gen_random_uuid()::text || gen_random_uuid()::text));
