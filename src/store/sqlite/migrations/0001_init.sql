-- Sluice schema, version 1 (SQLite). Times are integer milliseconds since the Unix epoch,
-- taken from the store's clock. JSON columns hold text.

CREATE TABLE operations (
  seq                 INTEGER PRIMARY KEY,
  tenant              TEXT    NOT NULL,
  id                  TEXT    NOT NULL,
  kind                TEXT    NOT NULL,
  class               TEXT    NOT NULL,
  digest              TEXT    NOT NULL,
  input               TEXT    NOT NULL,
  state               TEXT    NOT NULL CHECK (state IN ('queued', 'running', 'succeeded', 'failed',
                                                        'cancelled', 'dead', 'needs_reconciliation')),
  attempt             INTEGER NOT NULL DEFAULT 0,
  max_attempts        INTEGER NOT NULL,
  epoch               INTEGER NOT NULL DEFAULT 0,
  run_after           INTEGER NOT NULL,
  deadline_at         INTEGER,
  created_at          INTEGER NOT NULL,
  updated_at          INTEGER NOT NULL,
  started_at          INTEGER,
  finished_at         INTEGER,
  lease_owner         TEXT,
  lease_expires_at    INTEGER,
  lease_expiries      INTEGER NOT NULL DEFAULT 0,
  effect_started_at   INTEGER,
  cancel              TEXT CHECK (cancel IN ('requested', 'too_late')),
  cancel_requested_at INTEGER,
  result              TEXT,
  error               TEXT,
  UNIQUE (tenant, id)
);

-- The claim path: the next ready operation of one tenant in one class.
CREATE INDEX operations_ready ON operations (class, tenant, run_after, seq) WHERE state = 'queued';
-- The rescuer: leases in order of expiry.
CREATE INDEX operations_leases ON operations (lease_expires_at) WHERE state = 'running';
-- Retention: terminal operations in order of completion.
CREATE INDEX operations_finished ON operations (finished_at) WHERE finished_at IS NOT NULL;
-- Listing by state (dead letters, reconciliation queue) per tenant.
CREATE INDEX operations_tenant_state ON operations (tenant, state, seq);

-- One row per attempt, written when the attempt ends.
CREATE TABLE attempts (
  tenant         TEXT    NOT NULL,
  op_id          TEXT    NOT NULL,
  epoch          INTEGER NOT NULL,
  attempt        INTEGER NOT NULL,
  owner          TEXT,
  started_at     INTEGER NOT NULL,
  ended_at       INTEGER NOT NULL,
  outcome        TEXT    NOT NULL,
  error          TEXT,
  retry_delay_ms INTEGER,
  PRIMARY KEY (tenant, op_id, epoch)
);

-- The effect journal: one row per external effect of an operation. `pending`: a request may
-- have been sent and its outcome is unknown. `absent`: every request so far definitively did
-- not take effect (a 503, a confirmed lookup). `committed`: done, result kept. `failed`: the
-- provider refused for good.
CREATE TABLE effects (
  tenant        TEXT    NOT NULL,
  op_id         TEXT    NOT NULL,
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
  PRIMARY KEY (tenant, op_id, name)
);

-- Per (class, tenant): admission counters and the fair scheduler's state. `waiting` counts
-- queued operations, `running` running ones; `ready_at` is the earliest run_after of a queued
-- operation (NULL when none; may be stale-early, never stale-late); `vtime` is the tenant's
-- virtual time: the claim serves the lowest, then adds 1 / weight.
CREATE TABLE queues (
  class       TEXT    NOT NULL,
  tenant      TEXT    NOT NULL,
  waiting     INTEGER NOT NULL DEFAULT 0,
  running     INTEGER NOT NULL DEFAULT 0,
  ready_at    INTEGER,
  vtime       REAL    NOT NULL DEFAULT 0,
  weight      REAL    NOT NULL DEFAULT 1,
  max_running INTEGER,
  max_waiting INTEGER,
  PRIMARY KEY (class, tenant)
);
CREATE INDEX queues_schedule ON queues (class, vtime) WHERE ready_at IS NOT NULL;

-- What remains of a purged operation: a resubmission of the id is refused, not run again.
CREATE TABLE tombstones (
  tenant      TEXT    NOT NULL,
  id          TEXT    NOT NULL,
  kind        TEXT    NOT NULL,
  digest      TEXT    NOT NULL,
  state       TEXT    NOT NULL,
  finished_at INTEGER NOT NULL,
  purged_at   INTEGER NOT NULL,
  PRIMARY KEY (tenant, id)
);
CREATE INDEX tombstones_finished ON tombstones (finished_at);

-- Operator actions (redrive, reconcile, cancel by an admin): who, when, why.
CREATE TABLE events (
  seq    INTEGER PRIMARY KEY,
  tenant TEXT    NOT NULL,
  op_id  TEXT    NOT NULL,
  at     INTEGER NOT NULL,
  action TEXT    NOT NULL,
  by     TEXT    NOT NULL,
  reason TEXT    NOT NULL,
  detail TEXT
);
CREATE INDEX events_operation ON events (tenant, op_id, seq);
