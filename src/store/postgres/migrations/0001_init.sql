-- Sluice schema, version 1 (PostgreSQL). The same tables, columns and meanings as the SQLite
-- migration of the same number. Times are bigint milliseconds since the Unix epoch from the
-- store's clock: the server's `clock_timestamp()` unless a test passes its own `now`. JSON
-- columns hold text (the exact canonical JSON the digest was computed over; jsonb would reorder
-- keys and refuse some escapes). Key columns use the "C" collation: byte order, as in SQLite.
--
-- migrate.ts runs this file with `search_path` set to the store's schema, so names here are
-- unqualified; every function captures that path (`SET search_path FROM CURRENT`), so it reads
-- its own schema's tables whatever the caller's path.
--
-- Hot paths are functions, one round trip each: submit_many, claim, finish_many, lease_extend,
-- effect_begin. They run under READ COMMITTED with row locks. Lock order, to keep deadlocks out:
-- a transaction that locks several `queues` rows takes them in (class, tenant) order, and takes
-- an operation's row before its queue row. Lookups go through the (tenant, id) key or `seq`
-- only, in shapes whose generic plan cannot turn into a scan (see the indexes' comments).
--
-- This file is long because version 1 is one file in every driver: the tables and the
-- functions that keep them are one unit.

CREATE TABLE operations (
  seq                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant              text COLLATE "C" NOT NULL,
  id                  text COLLATE "C" NOT NULL,
  kind                text COLLATE "C" NOT NULL,
  class               text COLLATE "C" NOT NULL,
  digest              text    NOT NULL,
  input               text    NOT NULL,
  state               text    NOT NULL CHECK (state IN ('queued', 'running', 'succeeded', 'failed',
                                                        'cancelled', 'dead', 'needs_reconciliation')),
  attempt             integer NOT NULL DEFAULT 0,
  max_attempts        integer NOT NULL,
  epoch               integer NOT NULL DEFAULT 0,
  run_after           bigint  NOT NULL,
  deadline_at         bigint,
  created_at          bigint  NOT NULL,
  updated_at          bigint  NOT NULL,
  started_at          bigint,
  finished_at         bigint,
  lease_owner         text,
  lease_expires_at    bigint,
  lease_expiries      integer NOT NULL DEFAULT 0,
  effect_started_at   bigint,
  cancel              text CHECK (cancel IN ('requested', 'too_late')),
  cancel_requested_at bigint,
  result              text,
  error               text,
  UNIQUE (tenant, id)
) WITH (fillfactor = 80);

-- The claim path: the next ready operation of one tenant in one class.
CREATE INDEX operations_ready ON operations (class, tenant, run_after, seq) WHERE state = 'queued';
-- The rescuer: leases in order of expiry. `lease_expires_at` is set exactly while an operation
-- runs; the predicate names it rather than `state = 'running'`, so that a lookup by key that also
-- checks `state = 'running'` is never planned as a scan of this (small, early) index.
CREATE INDEX operations_leases ON operations (lease_expires_at) WHERE lease_expires_at IS NOT NULL;
-- Retention: terminal operations in order of completion.
CREATE INDEX operations_finished ON operations (finished_at) WHERE finished_at IS NOT NULL;
-- Listing by a terminal state (dead letters, the reconciliation queue). SQLite's (tenant, state,
-- seq) index is left out on purpose: on a new, empty table the planner cannot tell it from the
-- (tenant, id) key, and a generic plan cached then would read every operation of a tenant for
-- each lookup by id. Leading with `state` and leaving out live states keeps every lookup by
-- (tenant, id) on the key.
CREATE INDEX operations_state ON operations (state, seq) WHERE state NOT IN ('queued', 'running');

-- One row per attempt, written when the attempt ends.
CREATE TABLE attempts (
  tenant         text COLLATE "C" NOT NULL,
  op_id          text COLLATE "C" NOT NULL,
  epoch          integer NOT NULL,
  attempt        integer NOT NULL,
  owner          text,
  started_at     bigint  NOT NULL,
  ended_at       bigint  NOT NULL,
  outcome        text    NOT NULL,
  error          text,
  retry_delay_ms bigint,
  PRIMARY KEY (tenant, op_id, epoch)
);

-- The effect journal: one row per external effect of an operation. `pending`: a request may
-- have been sent and its outcome is unknown. `absent`: every request so far definitively did
-- not take effect (a 503, a confirmed lookup). `committed`: done, result kept. `failed`: the
-- provider refused for good.
CREATE TABLE effects (
  tenant        text COLLATE "C" NOT NULL,
  op_id         text COLLATE "C" NOT NULL,
  name          text COLLATE "C" NOT NULL,
  key           text    NOT NULL,
  state         text    NOT NULL CHECK (state IN ('pending', 'absent', 'committed', 'failed')),
  provider      text,
  cost          bigint,
  first_sent_at bigint  NOT NULL,
  last_sent_at  bigint  NOT NULL,
  sends         integer NOT NULL,
  committed_at  bigint,
  result        text,
  reference     text,
  error         text,
  epoch         integer NOT NULL,
  PRIMARY KEY (tenant, op_id, name)
);

-- Per (class, tenant): admission counters and the fair scheduler's state. `waiting` counts
-- queued operations, `running` running ones; `ready_at` is the earliest run_after of a queued
-- operation (NULL when none; may be stale-early, never stale-late); `vtime` is the tenant's
-- virtual time: the claim serves the lowest, then adds 1 / weight. The row lock is what makes
-- admission and `max_running` exact across processes: every change of the counters holds it.
CREATE TABLE queues (
  class       text COLLATE "C" NOT NULL,
  tenant      text COLLATE "C" NOT NULL,
  waiting     integer NOT NULL DEFAULT 0,
  running     integer NOT NULL DEFAULT 0,
  ready_at    bigint,
  vtime       double precision NOT NULL DEFAULT 0,
  weight      double precision NOT NULL DEFAULT 1,
  max_running integer,
  max_waiting integer,
  PRIMARY KEY (class, tenant)
) WITH (fillfactor = 70);
-- The claim's candidates in service order: (vtime, tenant), so `LIMIT` reads only what it serves.
CREATE INDEX queues_schedule ON queues (class, vtime, tenant) WHERE ready_at IS NOT NULL;

-- What remains of a purged operation: a resubmission of the id is refused, not run again.
CREATE TABLE tombstones (
  tenant      text COLLATE "C" NOT NULL,
  id          text COLLATE "C" NOT NULL,
  kind        text    NOT NULL,
  digest      text    NOT NULL,
  state       text    NOT NULL,
  finished_at bigint  NOT NULL,
  purged_at   bigint  NOT NULL,
  PRIMARY KEY (tenant, id)
);
CREATE INDEX tombstones_finished ON tombstones (finished_at);

-- Operator actions (redrive, reconcile, cancel by an admin): who, when, why.
CREATE TABLE events (
  seq    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  tenant text COLLATE "C" NOT NULL,
  op_id  text COLLATE "C" NOT NULL,
  at     bigint  NOT NULL,
  action text    NOT NULL,
  by     text    NOT NULL,
  reason text    NOT NULL,
  detail text
);
CREATE INDEX events_operation ON events (tenant, op_id, seq);

-- The store's clock: the caller's `now` when a test injects a clock, else the server's.
CREATE FUNCTION now_ms(p_now bigint) RETURNS bigint
LANGUAGE sql VOLATILE
AS $$ SELECT coalesce(p_now, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) $$;

-- The helpers below are PL/pgSQL, not SQL: a SQL function that cannot be inlined is planned
-- again on every call, PL/pgSQL keeps its plans for the session.

-- The LISTEN/NOTIFY channel of this schema (postgres/notify.ts listens on the same name).
CREATE FUNCTION wakeup_channel() RETURNS text
LANGUAGE plpgsql STABLE SET search_path FROM CURRENT
AS $$ BEGIN RETURN 'sluice_' || current_schema(); END $$;

-- Operations entered `queued` with the given earliest `run_after` (store/sqlite/queue-counters.ts
-- queueEnter, same rules). When the tenant had no ready work, its virtual time is raised to that
-- of the least-served eligible tenant, so time spent idle is not banked as credit. The common
-- case is one UPDATE; a tenant's first operation in a class creates the row (zeros, weight 1:
-- what the UPDATE then sets is what SQLite's INSERT would have written).
CREATE FUNCTION queue_enter(p_class text, p_tenant text, p_count integer, p_run_after bigint,
                            p_left_running integer, p_set_limits boolean, p_weight double precision,
                            p_max_running integer, p_max_waiting integer) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
BEGIN
  FOR pass IN 1 .. 2 LOOP
    UPDATE queues q SET
        waiting = q.waiting + p_count,
        running = q.running - p_left_running,
        vtime = CASE WHEN q.ready_at IS NULL THEN greatest(q.vtime, coalesce(
                  (SELECT e.vtime FROM queues e WHERE e.class = p_class AND e.ready_at IS NOT NULL
                     AND (e.max_running IS NULL OR e.running < e.max_running)
                   ORDER BY e.vtime LIMIT 1), q.vtime))
                ELSE q.vtime END,
        ready_at = least(coalesce(q.ready_at, p_run_after), p_run_after),
        weight = CASE WHEN p_set_limits THEN p_weight ELSE q.weight END,
        max_running = CASE WHEN p_set_limits THEN p_max_running ELSE q.max_running END,
        max_waiting = CASE WHEN p_set_limits THEN p_max_waiting ELSE q.max_waiting END
     WHERE q.class = p_class AND q.tenant = p_tenant;
    EXIT WHEN FOUND;
    INSERT INTO queues (class, tenant) VALUES (p_class, p_tenant) ON CONFLICT DO NOTHING;
  END LOOP;
END
$$;

-- Operations left `queued` and/or `running` without re-entering the queue.
CREATE FUNCTION queue_leave(p_class text, p_tenant text, p_waiting integer, p_running integer) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
BEGIN
  UPDATE queues SET waiting = waiting - p_waiting, running = running - p_running
   WHERE class = p_class AND tenant = p_tenant;
END
$$;

-- Acceptance of a batch (store/sqlite/submit.ts, same order of checks). Per item: an existing
-- record answers first (same digest: existing; else conflict), so duplicates never count against
-- capacity; a tombstone refuses a purged id; the waiting cap is checked under the queue row's
-- lock, so concurrent submits of one (class, tenant) cannot overshoot it; the insert is
-- `ON CONFLICT DO NOTHING`, so a concurrent duplicate resolves to existing/conflict, never to
-- an error. The record and the tombstone are read by one statement (one snapshot): a purge
-- committing in between cannot make an id look neither accepted nor purged.
--
-- Queue rows are locked in (class, tenant) order. When no item carries limits, the counters of
-- each (class, tenant) move once, after the loop, in order of first appearance (the same end
-- state as one move per item, at a fraction of the row versions), and their rows are locked only
-- then, so claimers skip them for no longer than the commit. Otherwise the rows are locked up
-- front and each item moves its counters at once, since the next item's cap check counts it.
-- One row per item, in item order: status, digest_matches (for `expired`), the operation.
CREATE FUNCTION submit_many(p_now bigint, p_tenant text[], p_id text[], p_kind text[], p_class text[],
                            p_digest text[], p_input text[], p_max_attempts integer[],
                            p_deadline_ms bigint[], p_delay_ms bigint[], p_set_limits boolean[],
                            p_weight double precision[], p_max_running integer[],
                            p_max_waiting integer[], p_notify boolean)
RETURNS TABLE (status text, digest_matches boolean, op operations)
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
DECLARE
  v_now bigint := now_ms(p_now);
  v_n integer := coalesce(array_length(p_tenant, 1), 0);
  v_defer boolean := NOT (true = ANY (p_set_limits));
  v_waiting integer;
  v_run_after bigint;
  v_ready text[] := '{}';
  v_cls text;
  -- Created items whose queue entry is deferred: class, tenant, run_after.
  d_class text[] := '{}';
  d_tenant text[] := '{}';
  d_run_after bigint[] := '{}';
  k record;
  found_row record;
  r operations;
BEGIN
  IF v_n > 1 AND NOT v_defer THEN
    -- One index lookup per (class, tenant), in order (a join with the arrays would get a
    -- generic plan that may scan the table).
    FOR k IN SELECT DISTINCT u.c, u.t FROM unnest(p_class, p_tenant) AS u(c, t) ORDER BY u.c, u.t LOOP
      PERFORM 1 FROM queues q WHERE q.class = k.c AND q.tenant = k.t FOR UPDATE;
    END LOOP;
  END IF;
  FOR i IN 1 .. v_n LOOP
    status := NULL; digest_matches := NULL; op := NULL;
    SELECT o AS op, t.digest AS tomb INTO found_row
      FROM (SELECT 1) AS one
      LEFT JOIN operations o ON o.tenant = p_tenant[i] AND o.id = p_id[i]
      LEFT JOIN tombstones t ON t.tenant = p_tenant[i] AND t.id = p_id[i];
    IF (found_row.op).seq IS NOT NULL THEN
      op := found_row.op;
      status := CASE WHEN op.digest = p_digest[i] THEN 'existing' ELSE 'conflict' END;
      RETURN NEXT;
      CONTINUE;
    END IF;
    IF found_row.tomb IS NOT NULL THEN
      status := 'expired';
      digest_matches := found_row.tomb = p_digest[i];
      RETURN NEXT;
      CONTINUE;
    END IF;
    IF p_max_waiting[i] IS NOT NULL THEN
      IF p_max_waiting[i] <= 0 THEN
        status := 'rejected';
        RETURN NEXT;
        CONTINUE;
      END IF;
      -- The count must be read under the row lock: create the row if it is the tenant's first.
      INSERT INTO queues (class, tenant) VALUES (p_class[i], p_tenant[i]) ON CONFLICT DO NOTHING;
      SELECT q.waiting INTO v_waiting FROM queues q
       WHERE q.class = p_class[i] AND q.tenant = p_tenant[i] FOR UPDATE;
      IF v_waiting >= p_max_waiting[i] THEN
        status := 'rejected';
        RETURN NEXT;
        CONTINUE;
      END IF;
    END IF;
    v_run_after := v_now + greatest(0, coalesce(p_delay_ms[i], 0));
    INSERT INTO operations (tenant, id, kind, class, digest, input, state, max_attempts, run_after,
                            deadline_at, created_at, updated_at)
    VALUES (p_tenant[i], p_id[i], p_kind[i], p_class[i], p_digest[i], p_input[i], 'queued',
            p_max_attempts[i], v_run_after, v_now + p_deadline_ms[i], v_now, v_now)
    ON CONFLICT (tenant, id) DO NOTHING
    RETURNING * INTO r;
    IF NOT FOUND THEN
      -- A concurrent submit of the same id committed first (this statement waited for it).
      SELECT * INTO r FROM operations o WHERE o.tenant = p_tenant[i] AND o.id = p_id[i];
      status := CASE WHEN r.digest = p_digest[i] THEN 'existing' ELSE 'conflict' END;
      op := r;
      RETURN NEXT;
      CONTINUE;
    END IF;
    IF v_defer THEN
      d_class := d_class || p_class[i];
      d_tenant := d_tenant || p_tenant[i];
      d_run_after := d_run_after || v_run_after;
    ELSE
      PERFORM queue_enter(p_class[i], p_tenant[i], 1, v_run_after, 0, p_set_limits[i], p_weight[i],
                          p_max_running[i], p_max_waiting[i]);
    END IF;
    IF v_run_after <= v_now AND NOT p_class[i] = ANY (v_ready) THEN
      v_ready := v_ready || p_class[i];
    END IF;
    status := 'created';
    op := r;
    RETURN NEXT;
  END LOOP;
  IF array_length(d_class, 1) = 1 THEN
    PERFORM queue_enter(d_class[1], d_tenant[1], 1, d_run_after[1], 0, false, 1, NULL, NULL);
  ELSIF array_length(d_class, 1) > 1 THEN
    -- Locked in (class, tenant) order first, then counted in order of first appearance.
    FOR k IN SELECT DISTINCT u.c, u.t FROM unnest(d_class, d_tenant) AS u(c, t) ORDER BY u.c, u.t LOOP
      PERFORM 1 FROM queues q WHERE q.class = k.c AND q.tenant = k.t FOR UPDATE;
    END LOOP;
    FOR k IN
      SELECT u.c, u.t, count(*)::integer AS n, min(u.ra) AS ra
        FROM unnest(d_class, d_tenant, d_run_after) WITH ORDINALITY AS u(c, t, ra, ord)
       GROUP BY u.c, u.t
       ORDER BY min(u.ord)
    LOOP
      PERFORM queue_enter(k.c, k.t, k.n, k.ra, 0, false, 1, NULL, NULL);
    END LOOP;
  END IF;
  -- Delivered when (and only if) the transaction commits: idle workers of the class wake up.
  IF p_notify THEN
    FOREACH v_cls IN ARRAY v_ready LOOP
      PERFORM pg_notify(wakeup_channel(), v_cls);
    END LOOP;
  END IF;
END
$$;

-- The claim (store/sqlite/claim.ts, same algorithm): up to p_limit ready operations of one
-- class, fairly across tenants. Start-time fair queuing over the `queues` rows: serve the
-- eligible tenant with the lowest virtual time, advance it by 1 / weight, repeat.
--
-- Concurrency: candidate queue rows are taken `FOR UPDATE SKIP LOCKED`, so claimers in other
-- processes never wait on each other and never see the same tenant at once; `running` is read
-- from the locked row, so `max_running` holds whatever the number of claimers. Operations are
-- also taken `SKIP LOCKED` (one being cancelled or rescued is left for the next claim). The
-- operations of each candidate are read after its queue row is locked (a new statement, a new
-- snapshot), so an operation another claimer just took is never seen as queued.
CREATE FUNCTION claim(p_class text, p_owner text, p_limit integer, p_lease_ms bigint, p_now bigint)
RETURNS SETOF operations
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
DECLARE
  v_seen text[] := '{}';
  v_claimed integer := 0;
  v_want integer;
  n integer;
  best integer;
  c record;
  r operations;
  -- Per candidate of a round: tenant, virtual time, weight, its operations (offset, count), taken.
  t text[];
  vt double precision[];
  w double precision[];
  off integer[];
  cnt integer[];
  taken integer[];
  ops bigint[];
BEGIN
  FOR v_round IN 1 .. 4 LOOP
    EXIT WHEN v_claimed >= p_limit;
    v_want := p_limit - v_claimed;
    t := '{}'; vt := '{}'; w := '{}'; off := '{}'; cnt := '{}'; taken := '{}'; ops := '{}'; n := 0;
    FOR c IN
      SELECT q.tenant, q.running, q.max_running, q.vtime, q.weight FROM queues q
       WHERE q.class = p_class AND q.ready_at <= p_now
         AND (q.max_running IS NULL OR q.running < q.max_running)
         AND q.tenant <> ALL (v_seen)
       ORDER BY q.vtime, q.tenant
       LIMIT v_want
       FOR UPDATE SKIP LOCKED
    LOOP
      n := n + 1;
      v_seen := v_seen || c.tenant;
      t := t || c.tenant;
      vt := vt || c.vtime;
      w := w || c.weight;
      taken := taken || 0;
      off := off || coalesce(array_length(ops, 1), 0);
      ops := ops || ARRAY(
        SELECT o.seq FROM operations o
         WHERE o.class = p_class AND o.tenant = c.tenant AND o.state = 'queued' AND o.run_after <= p_now
         ORDER BY o.run_after, o.seq
         LIMIT least(v_want, coalesce(c.max_running - c.running, v_want))
         FOR UPDATE SKIP LOCKED);
      cnt := cnt || (coalesce(array_length(ops, 1), 0) - off[n]);
    END LOOP;
    EXIT WHEN n = 0;
    -- Serve the lowest virtual time first, one operation at a time (ties: candidate order).
    WHILE v_claimed < p_limit LOOP
      best := NULL;
      FOR k IN 1 .. n LOOP
        IF taken[k] < cnt[k] AND (best IS NULL OR vt[k] < vt[best]) THEN
          best := k;
        END IF;
      END LOOP;
      EXIT WHEN best IS NULL;
      taken[best] := taken[best] + 1;
      vt[best] := vt[best] + 1 / w[best];
      UPDATE operations SET state = 'running', attempt = attempt + 1, epoch = epoch + 1, started_at = p_now,
             lease_owner = p_owner, lease_expires_at = p_now + p_lease_ms, updated_at = p_now
       WHERE seq = ops[off[best] + taken[best]]
      RETURNING * INTO r;
      v_claimed := v_claimed + 1;
      RETURN NEXT r;
    END LOOP;
    FOR k IN 1 .. n LOOP
      UPDATE queues SET running = running + taken[k], waiting = waiting - taken[k], vtime = vt[k],
             ready_at = (SELECT min(o.run_after) FROM operations o
                          WHERE o.class = p_class AND o.tenant = t[k] AND o.state = 'queued')
       WHERE class = p_class AND tenant = t[k];
    END LOOP;
  END LOOP;
END
$$;

-- The end of a batch of attempts (store/sqlite/finish.ts finishOne, same rules), fenced: an
-- item takes effect only while its operation is `running` under the item's epoch. The rows are
-- locked in (class, tenant, seq) order, each before its queue row. A `failed` end with an effect
-- still `pending` becomes `needs_reconciliation` (core/decisions.ts adjustFailure). A cancel
-- stops the operation only before its point of no return (an effect `pending` or `committed`).
-- Returns the 1-based positions of the items that took effect.
CREATE FUNCTION finish_many(p_now bigint, p_tenant text[], p_id text[], p_epoch integer[], p_outcome text[],
                            p_result text[], p_error text[], p_delay_ms bigint[], p_notify boolean)
RETURNS SETOF integer
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
DECLARE
  v_now bigint := now_ms(p_now);
  v_seqs bigint[];
  v_ords integer[];
  v_ord integer;
  o operations;
  v_pending boolean;
  v_no_return boolean;
  v_cancel_asked boolean;
  v_to text;
  v_outcome text;
  v_error text;
  v_result text;
  v_delay bigint;
  v_requeue boolean;
  v_run_after bigint;
  v_ready text[] := '{}';
  v_cls text;
BEGIN
  -- The operations the items name, in lock order. One lookup per item on the (tenant, id) key:
  -- OFFSET 0 keeps it a nested loop on that key whatever the generic plan (a join with the
  -- arrays, or a `state` condition inside, could be planned as a scan of all running rows).
  SELECT array_agg(f.seq ORDER BY f.class, f.tenant, f.seq), array_agg(u.ord::integer ORDER BY f.class, f.tenant, f.seq)
    INTO v_seqs, v_ords
    FROM unnest(p_tenant, p_id, p_epoch) WITH ORDINALITY AS u(tenant, id, epoch, ord)
   CROSS JOIN LATERAL (SELECT x.seq, x.class, x.tenant, x.epoch, x.state FROM operations x
                        WHERE x.tenant = u.tenant AND x.id = u.id OFFSET 0) f
   WHERE f.epoch = u.epoch AND f.state = 'running';
  FOR j IN 1 .. coalesce(array_length(v_seqs, 1), 0) LOOP
    v_ord := v_ords[j];
    -- Locked, then checked again: a rescue may have moved it since the lookup. The same lease
    -- twice in one batch: the first item ends the attempt, the second finds it no longer running.
    SELECT * INTO o FROM operations x
     WHERE x.seq = v_seqs[j] AND x.epoch = p_epoch[v_ord] AND x.state = 'running'
       FOR UPDATE;
    CONTINUE WHEN NOT FOUND;
    v_pending := EXISTS (SELECT 1 FROM effects e WHERE e.tenant = o.tenant AND e.op_id = o.id AND e.state = 'pending');
    v_no_return := EXISTS (SELECT 1 FROM effects e WHERE e.tenant = o.tenant AND e.op_id = o.id
                                                     AND e.state IN ('pending', 'committed'));
    v_cancel_asked := o.cancel IS NOT DISTINCT FROM 'requested' AND NOT v_no_return;
    v_outcome := p_outcome[v_ord];
    v_error := NULL;
    v_result := NULL;
    v_delay := NULL;
    CASE v_outcome
      WHEN 'succeeded' THEN
        v_to := 'succeeded';
        v_result := p_result[v_ord];
      WHEN 'failed' THEN
        v_to := CASE WHEN v_pending THEN 'needs_reconciliation' ELSE 'failed' END;
        v_error := p_error[v_ord];
      WHEN 'dead', 'needs_reconciliation' THEN
        v_to := v_outcome;
        v_error := p_error[v_ord];
      WHEN 'retry' THEN
        v_to := CASE WHEN v_cancel_asked THEN 'cancelled' ELSE 'queued' END;
        v_error := p_error[v_ord];
        IF v_to = 'queued' THEN v_delay := greatest(0, p_delay_ms[v_ord]); END IF;
      WHEN 'cancelled' THEN
        -- Past the point of no return the operation cannot end cancelled: it runs again.
        v_to := CASE WHEN v_no_return THEN 'queued' ELSE 'cancelled' END;
        IF v_to = 'queued' THEN v_outcome := 'released'; END IF;
      WHEN 'released' THEN
        v_to := CASE WHEN v_cancel_asked THEN 'cancelled' ELSE 'queued' END;
    END CASE;
    v_requeue := v_to = 'queued';
    v_run_after := CASE WHEN v_requeue THEN v_now + coalesce(v_delay, 0) ELSE o.run_after END;
    UPDATE operations SET
        state = v_to,
        -- A release (shutdown, or a cancel that came too late) does not consume an attempt.
        attempt = CASE WHEN v_outcome = 'released' THEN o.attempt - 1 ELSE o.attempt END,
        run_after = v_run_after,
        result = v_result,
        -- The last error stays visible while the operation waits to retry; success clears it.
        error = CASE WHEN v_to = 'succeeded' THEN NULL ELSE coalesce(v_error, o.error) END,
        finished_at = CASE WHEN v_requeue THEN NULL ELSE v_now END,
        updated_at = v_now,
        lease_owner = NULL,
        lease_expires_at = NULL,
        -- A cancel that did not stop the operation is answered too late, also when it goes back
        -- to the queue (only past the point of no return can a cancelled attempt requeue):
        -- `requested` is an open question only while the operation runs.
        cancel = CASE WHEN o.cancel = 'requested' AND v_to <> 'cancelled' THEN 'too_late' ELSE o.cancel END
     WHERE seq = o.seq;
    INSERT INTO attempts (tenant, op_id, epoch, attempt, owner, started_at, ended_at, outcome, error, retry_delay_ms)
    VALUES (o.tenant, o.id, o.epoch, o.attempt, o.lease_owner, coalesce(o.started_at, v_now), v_now,
            CASE WHEN v_outcome = 'retry' AND v_to = 'cancelled' THEN 'cancelled' ELSE v_outcome END,
            v_error, v_delay);
    IF v_requeue THEN
      PERFORM queue_enter(o.class, o.tenant, 1, v_run_after, 1, false, 1, NULL, NULL);
      IF v_run_after <= v_now AND NOT o.class = ANY (v_ready) THEN
        v_ready := v_ready || o.class;
      END IF;
    ELSE
      PERFORM queue_leave(o.class, o.tenant, 0, 1);
    END IF;
    RETURN NEXT v_ord;
  END LOOP;
  IF p_notify THEN
    FOREACH v_cls IN ARRAY v_ready LOOP
      PERFORM pg_notify(wakeup_channel(), v_cls);
    END LOOP;
  END IF;
END
$$;

-- The heartbeat: extends every lease of the batch still held (fenced like finish_many) and
-- reports, per item, the operation's `cancel` state; items whose lease is gone return nothing.
-- Rows are locked in finish_many's order, so a heartbeat and a finish never deadlock.
CREATE FUNCTION lease_extend(p_now bigint, p_tenant text[], p_id text[], p_epoch integer[], p_lease_ms bigint)
RETURNS TABLE (ord integer, cancel text)
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
DECLARE
  v_now bigint := now_ms(p_now);
  k record;
BEGIN
  FOR k IN
    SELECT f.seq, u.ord::integer AS i, u.epoch
      FROM unnest(p_tenant, p_id, p_epoch) WITH ORDINALITY AS u(tenant, id, epoch, ord)
     CROSS JOIN LATERAL (SELECT x.seq, x.class, x.tenant, x.epoch, x.state FROM operations x
                          WHERE x.tenant = u.tenant AND x.id = u.id OFFSET 0) f
     WHERE f.epoch = u.epoch AND f.state = 'running'
     ORDER BY f.class, f.tenant, f.seq
  LOOP
    ord := k.i;
    UPDATE operations o SET lease_expires_at = v_now + p_lease_ms
     WHERE o.seq = k.seq AND o.epoch = k.epoch AND o.state = 'running'
    RETURNING o.cancel INTO cancel;
    IF FOUND THEN
      RETURN NEXT;
    END IF;
  END LOOP;
END
$$;

-- Step 3 of the effect protocol (store/sqlite/effects.ts effectBegin). In one transaction:
-- check the lease and that no cancel is pending, mark the operation's point of no return, and
-- write the `pending` row (or return the row an earlier attempt wrote). The UPDATE takes the
-- operation's row lock, as cancel does, so a cancel and the first effect cannot both win.
-- status: 'created' | 'existing' | 'cancel-requested' | 'lease-lost'.
CREATE FUNCTION effect_begin(p_now bigint, p_tenant text, p_id text, p_epoch integer, p_name text, p_key text,
                             p_provider text, p_cost bigint)
RETURNS TABLE (status text, clock bigint, eff effects)
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
DECLARE
  e effects;
BEGIN
  clock := now_ms(p_now);
  -- Found by its (tenant, id) key, then updated by `seq` (see finish_many on lookups).
  UPDATE operations SET effect_started_at = coalesce(effect_started_at, clock), updated_at = clock
   WHERE seq = (SELECT x.seq FROM operations x WHERE x.tenant = p_tenant AND x.id = p_id)
     AND epoch = p_epoch AND state = 'running' AND cancel IS DISTINCT FROM 'requested';
  IF NOT FOUND THEN
    PERFORM 1 FROM operations o
     WHERE o.seq = (SELECT x.seq FROM operations x WHERE x.tenant = p_tenant AND x.id = p_id)
       AND o.epoch = p_epoch AND o.state = 'running';
    status := CASE WHEN FOUND THEN 'cancel-requested' ELSE 'lease-lost' END;
    RETURN NEXT;
    RETURN;
  END IF;
  SELECT * INTO e FROM effects x WHERE x.tenant = p_tenant AND x.op_id = p_id AND x.name = p_name;
  IF FOUND THEN
    status := 'existing';
  ELSE
    INSERT INTO effects (tenant, op_id, name, key, state, provider, cost, first_sent_at, last_sent_at, sends, epoch)
    VALUES (p_tenant, p_id, p_name, p_key, 'pending', p_provider, p_cost, clock, clock, 1, p_epoch)
    RETURNING * INTO e;
    status := 'created';
  END IF;
  eff := e;
  RETURN NEXT;
END
$$;
