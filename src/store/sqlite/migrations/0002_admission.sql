-- Admission and budgets, enforced across every process sharing the store.

-- Waiting operations per class, all tenants together: the class's global queue bound.
CREATE TABLE classes (
  class   TEXT    PRIMARY KEY,
  waiting INTEGER NOT NULL DEFAULT 0
);
INSERT INTO classes (class, waiting) SELECT class, sum(waiting) FROM queues GROUP BY class;

-- Spend budgets and call-rate caps, in fixed windows. A spend is reserved when an effect's
-- `pending` row is written, then committed (effect committed) or released (absent, failed).
CREATE TABLE budgets (
  key          TEXT    NOT NULL,
  window_start INTEGER NOT NULL,
  window_ms    INTEGER NOT NULL,
  reserved     INTEGER NOT NULL DEFAULT 0,
  committed    INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (key, window_start)
);
CREATE INDEX budgets_window ON budgets (window_start);

-- The spend reservations an effect holds: [{key, windowStart, cost}], settled with the effect.
ALTER TABLE effects ADD COLUMN reservations TEXT;

-- The service-wide retry budget: first attempts and retries per time bucket, sharded so that
-- concurrent claimers in several processes do not all update one row.
CREATE TABLE retry_budget (
  bucket   INTEGER NOT NULL,
  shard    INTEGER NOT NULL,
  firsts   INTEGER NOT NULL DEFAULT 0,
  retries  INTEGER NOT NULL DEFAULT 0,
  denials  INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (bucket, shard)
);
