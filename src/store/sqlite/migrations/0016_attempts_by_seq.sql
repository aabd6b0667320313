-- Version 16. An operation's attempts are kept in the order of the operation's `seq`, not of its
-- (tenant, id). The attempts' key was (tenant, op_id, epoch): a worker's round of ends wrote its
-- rows wherever each client's id sorts, and an idempotency key is often random, so a round of 32
-- ends dirtied up to 32 pages of that key's index (docs/benchmarks.md). Keyed by (op_seq, epoch)
-- in a table without a rowid, a round's rows land on the table's last pages, and the table is one
-- b-tree where it was two. The operation's tenant and id are read from its row.
-- Attempt rows without an operation (none are written: the purge deletes both) are not carried.
CREATE TABLE attempts_by_seq (
  op_seq         INTEGER NOT NULL,
  epoch          INTEGER NOT NULL,
  attempt        INTEGER NOT NULL,
  owner          TEXT,
  started_at     INTEGER NOT NULL,
  ended_at       INTEGER NOT NULL,
  outcome        TEXT    NOT NULL,
  error          TEXT,
  retry_delay_ms INTEGER,
  PRIMARY KEY (op_seq, epoch)
) WITHOUT ROWID;
INSERT INTO attempts_by_seq (op_seq, epoch, attempt, owner, started_at, ended_at, outcome, error, retry_delay_ms)
  SELECT o.seq, a.epoch, a.attempt, a.owner, a.started_at, a.ended_at, a.outcome, a.error, a.retry_delay_ms
    FROM attempts a JOIN operations o ON o.tenant = a.tenant AND o.id = a.op_id;
DROP TABLE attempts;
ALTER TABLE attempts_by_seq RENAME TO attempts;
