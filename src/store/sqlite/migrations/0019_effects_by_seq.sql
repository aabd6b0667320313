-- Version 19. An operation's effects are found by the operation's `seq`, as its attempts are since
-- version 16. The effects' key was (tenant, op_id, name): each begin put an entry into that key's
-- index wherever the client's id sorts, and an idempotency key is often random, so a round of 32
-- begins dirtied up to 32 pages of the index. Keyed by (op_seq, name), a round's entries land on
-- the index's last pages, as its rows do on the table's. The table keeps a rowid (an effect's row
-- holds the provider's result, which may be large); the operation's tenant and id are read from
-- its row. Effect rows without an operation (none are written: the purge deletes both) are not
-- carried.
CREATE TABLE effects_by_seq (
  op_seq        INTEGER NOT NULL,
  name          TEXT    NOT NULL,
  key           TEXT    NOT NULL,
  state         TEXT    NOT NULL CHECK (state IN ('pending', 'absent', 'committed', 'failed')),
  provider      TEXT,
  cost          INTEGER,
  first_sent_at INTEGER NOT NULL,
  last_sent_at  INTEGER NOT NULL,
  sends         INTEGER NOT NULL,
  committed_at  INTEGER,
  result        TEXT,
  reference     TEXT,
  error         TEXT,
  epoch         INTEGER NOT NULL,
  reservations  TEXT
);
INSERT INTO effects_by_seq (op_seq, name, key, state, provider, cost, first_sent_at, last_sent_at, sends,
                            committed_at, result, reference, error, epoch, reservations)
  SELECT o.seq, e.name, e.key, e.state, e.provider, e.cost, e.first_sent_at, e.last_sent_at, e.sends,
         e.committed_at, e.result, e.reference, e.error, e.epoch, e.reservations
    FROM effects e JOIN operations o ON o.tenant = e.tenant AND o.id = e.op_id
   ORDER BY o.seq, e.name;
DROP TABLE effects;
ALTER TABLE effects_by_seq RENAME TO effects;
CREATE UNIQUE INDEX effects_by_op ON effects (op_seq, name);
