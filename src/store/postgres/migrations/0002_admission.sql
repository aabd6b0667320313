-- Admission and budgets (PostgreSQL), version 2: the tables and meanings of SQLite's migration of
-- the same number, and the hot-path functions again with the new rules (store/sqlite/submit.ts,
-- claim.ts, finish.ts, effects.ts, budgets.ts, retry-budget.ts are the reference semantics).
--
-- Lock order, extended. Every transaction of the driver takes row locks in this order, so no
-- cycle of waits can form:
--
--   operation rows, in (class, tenant, seq) order
--     → queue rows, in (class, tenant) order
--       → class rows, in class order (always last, and only when `waiting` changes)
--         → the retry-budget row of the claim's bucket and shard
--
-- Claims take queue and operation rows `SKIP LOCKED`, so they never wait for them; they wait only
-- for the class row, at their very end. Budget rows hang off the operation row: a transaction
-- takes them after its operation row, in (key, window_start) order, and no transaction holding a
-- queue or class row ever waits for a budget row. The class row is the one row every submit and
-- claim of a class updates, so it is locked last and held only from the end of the function to
-- the commit that follows it; only a submit whose batch carries `maxQueued` locks it earlier
-- (after its queue rows), since the cap must be counted under the lock.
--
-- `queue_enter` / `queue_leave` (version 1) still move only the (class, tenant) counters. Every
-- caller moves the class counter too, once per transaction and at its end, with `classes_move`:
-- a class row taken inside `queue_enter` would be locked between two queue rows.
--
-- Functions whose arguments or results change are dropped and created again (a new argument
-- list would otherwise add an overload next to the old function); the others are replaced.

-- Waiting operations per class, all tenants together: the class's global queue bound. Kept in
-- step with `queues` (their sum per class) in the same transactions.
CREATE TABLE classes (
  class   text COLLATE "C" PRIMARY KEY,
  waiting integer NOT NULL DEFAULT 0
) WITH (fillfactor = 50);
-- No writer may move the counters while they are summed.
LOCK TABLE queues IN SHARE MODE;
INSERT INTO classes (class, waiting) SELECT class, sum(waiting) FROM queues GROUP BY class;

-- Spend budgets and call-rate caps, in fixed windows (`window_start = now - now % window_ms`).
-- A spend is reserved when an effect's `pending` row is written, then committed (effect
-- committed) or released (absent, failed); a call-rate draw is committed at once. Each row is
-- checked and drawn on only under its row lock, so processes cannot both pass and overspend.
CREATE TABLE budgets (
  key          text COLLATE "C" NOT NULL,
  window_start bigint NOT NULL,
  window_ms    bigint NOT NULL,
  reserved     bigint NOT NULL DEFAULT 0,
  committed    bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (key, window_start)
) WITH (fillfactor = 70);
-- Retention: windows that ended long ago.
CREATE INDEX budgets_window ON budgets (window_start);

-- The spend reservations an effect holds: [{key, windowStart, cost}], settled with the effect.
ALTER TABLE effects ADD COLUMN reservations jsonb;

-- The service-wide retry budget: first attempts and retries per time bucket, sharded so that
-- claimers in several processes do not all update one row.
CREATE TABLE retry_budget (
  bucket  bigint  NOT NULL,
  shard   integer NOT NULL,
  firsts  bigint  NOT NULL DEFAULT 0,
  retries bigint  NOT NULL DEFAULT 0,
  denials bigint  NOT NULL DEFAULT 0,
  PRIMARY KEY (bucket, shard)
) WITH (fillfactor = 70);

-- The class counters move by the given deltas (one entry per operation or per class, summed),
-- in class order, skipping classes whose `waiting` does not change. Called last.
CREATE FUNCTION classes_move(p_class text[], p_delta integer[]) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
DECLARE
  k record;
BEGIN
  FOR k IN
    SELECT u.c COLLATE "C" AS c, sum(u.d)::integer AS d
      FROM unnest(p_class, p_delta) AS u(c, d)
     GROUP BY 1
    HAVING sum(u.d) <> 0
     ORDER BY 1
  LOOP
    UPDATE classes x SET waiting = x.waiting + k.d WHERE x.class = k.c;
    CONTINUE WHEN FOUND;
    INSERT INTO classes AS x (class, waiting) VALUES (k.c, k.d)
    ON CONFLICT (class) DO UPDATE SET waiting = x.waiting + excluded.waiting;
  END LOOP;
END
$$;

-- Counts into the retry budget's (bucket, shard) row.
CREATE FUNCTION retry_budget_count(p_bucket bigint, p_shard integer, p_firsts bigint, p_retries bigint,
                                   p_denials bigint) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
BEGIN
  UPDATE retry_budget b SET firsts = b.firsts + p_firsts, retries = b.retries + p_retries,
         denials = b.denials + p_denials
   WHERE b.bucket = p_bucket AND b.shard = p_shard;
  IF NOT FOUND THEN
    INSERT INTO retry_budget AS b (bucket, shard, firsts, retries, denials)
    VALUES (p_bucket, p_shard, p_firsts, p_retries, p_denials)
    ON CONFLICT (bucket, shard) DO UPDATE SET firsts = b.firsts + excluded.firsts,
       retries = b.retries + excluded.retries, denials = b.denials + excluded.denials;
  END IF;
END
$$;

-- Allows and counts one retry if retries in [now - window, now] stay under
-- floor + ratio × first attempts, else counts a denial (store/sqlite/retry-budget.ts). Takes are
-- serialised by a transaction-scoped advisory lock of the schema (not a hot path: one call per
-- retry), and the sums are read by a statement that starts after the lock is granted, so each
-- take sees every take before it: concurrent takes can never allow more than the budget. First
-- attempts a claim is committing meanwhile may be missed, which only makes a take stricter.
CREATE FUNCTION retry_budget_take(p_now bigint, p_window_ms bigint, p_bucket_ms bigint, p_ratio double precision,
                                  p_floor double precision, p_shard integer) RETURNS boolean
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
DECLARE
  v_now bigint;
  v_firsts bigint;
  v_retries bigint;
  v_allowed boolean;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended('sluice:retry-budget:' || current_schema(), 0));
  v_now := now_ms(p_now);
  SELECT coalesce(sum(b.firsts), 0), coalesce(sum(b.retries), 0) INTO v_firsts, v_retries
    FROM retry_budget b WHERE b.bucket >= v_now - p_window_ms;
  v_allowed := v_retries < p_floor + p_ratio * v_firsts;
  PERFORM retry_budget_count(v_now - v_now % p_bucket_ms, p_shard, 0,
                             CASE WHEN v_allowed THEN 1 ELSE 0 END, CASE WHEN v_allowed THEN 0 ELSE 1 END);
  RETURN v_allowed;
END
$$;

-- Step 2 of the effect protocol (store/sqlite/budgets.ts drawBudgets): draws on every charge or
-- on none. The charges come in the caller's order (rates, then spend); `p_spend` marks the spend
-- ones, which are reserved and returned as `reservations`, while rate draws are committed at once.
--
-- 1. Lock: each row drawn on, in (key, window_start) order; a window's first draw creates its row
--    (zeros), then locks it. Two processes drawing at once queue on the row lock.
-- 2. Check, in the caller's order, against the use before this draw: the first charge that does
--    not fit refuses (`refused_by`, `retry_after` = when its window ends). A refusal changes
--    nothing: the rows this call created are deleted again (still zeros, seen by no one).
-- 3. Draw: one update per row.
CREATE FUNCTION budget_draw(p_now bigint, p_key text[], p_limit bigint[], p_window bigint[], p_cost bigint[],
                            p_spend boolean[], OUT refused_by text, OUT retry_after bigint,
                            OUT reservations jsonb)
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
DECLARE
  v_n integer := coalesce(array_length(p_key, 1), 0);
  v_start bigint[] := '{}';
  -- The locked rows: key, window start, use before this draw, whether this call created it.
  l_key text[] := '{}';
  l_start bigint[] := '{}';
  l_used bigint[] := '{}';
  l_new boolean[] := '{}';
  v_used bigint;
  v_new boolean;
  v_reserve bigint;
  v_commit bigint;
  j integer;
  k record;
BEGIN
  FOR i IN 1 .. v_n LOOP
    v_start := v_start || (p_now - p_now % p_window[i]);
  END LOOP;
  FOR k IN
    SELECT DISTINCT ON (1, 2) u.key COLLATE "C" AS key, u.ws, u.wm
      FROM unnest(p_key, v_start, p_window) AS u(key, ws, wm)
     ORDER BY 1, 2
  LOOP
    v_new := false;
    FOR pass IN 1 .. 3 LOOP
      SELECT b.reserved + b.committed INTO v_used FROM budgets b
       WHERE b.key = k.key AND b.window_start = k.ws FOR UPDATE;
      EXIT WHEN FOUND;
      INSERT INTO budgets (key, window_start, window_ms) VALUES (k.key, k.ws, k.wm) ON CONFLICT DO NOTHING;
      v_new := FOUND;
    END LOOP;
    l_key := l_key || k.key;
    l_start := l_start || k.ws;
    l_used := l_used || v_used;
    l_new := l_new || v_new;
  END LOOP;
  FOR i IN 1 .. v_n LOOP
    FOR m IN 1 .. array_length(l_key, 1) LOOP
      IF l_key[m] = p_key[i] AND l_start[m] = v_start[i] THEN j := m; END IF;
    END LOOP;
    IF l_used[j] + p_cost[i] > p_limit[i] THEN
      refused_by := p_key[i];
      retry_after := v_start[i] + p_window[i] - p_now;
      FOR m IN 1 .. array_length(l_key, 1) LOOP
        IF l_new[m] THEN
          DELETE FROM budgets b WHERE b.key = l_key[m] AND b.window_start = l_start[m];
        END IF;
      END LOOP;
      RETURN;
    END IF;
  END LOOP;
  FOR m IN 1 .. coalesce(array_length(l_key, 1), 0) LOOP
    v_reserve := 0;
    v_commit := 0;
    FOR i IN 1 .. v_n LOOP
      IF p_key[i] = l_key[m] AND v_start[i] = l_start[m] THEN
        IF p_spend[i] THEN v_reserve := v_reserve + p_cost[i]; ELSE v_commit := v_commit + p_cost[i]; END IF;
      END IF;
    END LOOP;
    UPDATE budgets b SET reserved = b.reserved + v_reserve, committed = b.committed + v_commit
     WHERE b.key = l_key[m] AND b.window_start = l_start[m];
  END LOOP;
  SELECT jsonb_agg(jsonb_build_object('key', u.key, 'windowStart', u.ws, 'cost', u.cost) ORDER BY u.ord)
    INTO reservations
    FROM unnest(p_key, v_start, p_cost, p_spend) WITH ORDINALITY AS u(key, ws, cost, spend, ord)
   WHERE u.spend;
END
$$;

-- Settles reservations (store/sqlite/budgets.ts settleReservations): `p_commit` move from
-- reserved to committed (the effect happened), `p_release` are given back (it did not). Rows are
-- updated in (key, window_start) order, the order budget_draw locks them in. A window purged
-- meanwhile has no row left to settle.
CREATE FUNCTION budget_settle(p_commit jsonb, p_release jsonb) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
DECLARE
  k record;
BEGIN
  FOR k IN
    SELECT r.key COLLATE "C" AS key, r.ws, sum(r.cost) AS total, coalesce(sum(r.cost) FILTER (WHERE r.done), 0) AS done
      FROM (SELECT x.key, x."windowStart" AS ws, x.cost, true AS done
              FROM jsonb_to_recordset(coalesce(p_commit, '[]')) AS x(key text, "windowStart" bigint, cost bigint)
            UNION ALL
            SELECT x.key, x."windowStart", x.cost, false
              FROM jsonb_to_recordset(coalesce(p_release, '[]')) AS x(key text, "windowStart" bigint, cost bigint)) r
     GROUP BY 1, 2
     ORDER BY 1, 2
  LOOP
    UPDATE budgets b SET reserved = b.reserved - k.total, committed = b.committed + k.done
     WHERE b.key = k.key AND b.window_start = k.ws;
  END LOOP;
END
$$;

-- Acceptance of a batch (store/sqlite/submit.ts, same order of checks). Per item: an existing
-- record answers first (same digest: existing; else conflict), so duplicates never count against
-- capacity; a tombstone refuses a purged id; then the tenant's waiting cap and the class's
-- queue bound, each counted under its row's lock; the insert is `ON CONFLICT DO NOTHING`, so a
-- concurrent duplicate resolves to existing/conflict, never to an error. The record and the
-- tombstone are read by one statement (one snapshot): a purge committing in between cannot make
-- an id look neither accepted nor purged.
--
-- Locks. When no item carries limits, nothing is locked before the inserts: the counters of each
-- (class, tenant) move once, after the loop, their rows locked in (class, tenant) order, and the
-- class rows after them (claimers skip a queue row for no longer than the commit). Otherwise
-- the queue rows of the batch are created if missing and locked up front, in (class, tenant)
-- order, and each item moves its tenant's counters at once (the next item's cap counts it).
-- When an item carries `maxQueued`, the class rows of the batch are locked next, in class
-- order, and the class count of an item is the locked row plus the batch's own additions so
-- far. Class counters move at the end, in class order (classes_move).
--
-- One row per item, in item order: status, digest_matches (for `expired`), reason and the
-- counts that refused it (for `rejected`), the operation.
DROP FUNCTION submit_many(bigint, text[], text[], text[], text[], text[], text[], integer[], bigint[], bigint[],
                          boolean[], double precision[], integer[], integer[], boolean);
CREATE FUNCTION submit_many(p_now bigint, p_tenant text[], p_id text[], p_kind text[], p_class text[],
                            p_digest text[], p_input text[], p_max_attempts integer[],
                            p_deadline_ms bigint[], p_delay_ms bigint[], p_set_limits boolean[],
                            p_weight double precision[], p_max_running integer[],
                            p_max_waiting integer[], p_max_queued integer[], p_notify boolean)
RETURNS TABLE (status text, digest_matches boolean, reason text, counted_waiting integer,
               counted_running integer, op operations)
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
DECLARE
  v_now bigint := now_ms(p_now);
  v_n integer := coalesce(array_length(p_tenant, 1), 0);
  v_defer boolean := NOT (true = ANY (p_set_limits));
  v_capped boolean := EXISTS (SELECT 1 FROM unnest(p_max_queued) AS m(v) WHERE m.v IS NOT NULL);
  v_waiting integer;
  v_running integer;
  v_class_waiting integer;
  v_pos integer;
  v_run_after bigint;
  v_ready text[] := '{}';
  v_cls text;
  -- Created items whose queue entry is deferred: class, tenant, run_after.
  d_class text[] := '{}';
  d_tenant text[] := '{}';
  d_run_after bigint[] := '{}';
  -- The batch's additions to its classes' waiting counts, applied at the end.
  c_class text[] := '{}';
  c_delta integer[] := '{}';
  k record;
  found_row record;
  r operations;
BEGIN
  IF NOT v_defer AND (v_n > 1 OR p_max_waiting[1] IS NOT NULL OR v_capped) THEN
    -- One index lookup per (class, tenant), in order (a join with the arrays would get a
    -- generic plan that may scan the table).
    FOR k IN
      SELECT DISTINCT u.c COLLATE "C" AS c, u.t COLLATE "C" AS t FROM unnest(p_class, p_tenant) AS u(c, t)
       ORDER BY 1, 2
    LOOP
      FOR pass IN 1 .. 3 LOOP
        PERFORM 1 FROM queues q WHERE q.class = k.c AND q.tenant = k.t FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO queues (class, tenant) VALUES (k.c, k.t) ON CONFLICT DO NOTHING;
      END LOOP;
    END LOOP;
  END IF;
  IF v_capped THEN
    -- Every class of the batch, not only the capped ones: classes_move takes the rest at the
    -- end, and the class rows must be locked in one order.
    FOR k IN SELECT DISTINCT u.c COLLATE "C" AS c FROM unnest(p_class) AS u(c) ORDER BY 1 LOOP
      FOR pass IN 1 .. 3 LOOP
        PERFORM 1 FROM classes x WHERE x.class = k.c FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO classes (class) VALUES (k.c) ON CONFLICT DO NOTHING;
      END LOOP;
    END LOOP;
  END IF;
  FOR i IN 1 .. v_n LOOP
    status := NULL; digest_matches := NULL; reason := NULL; counted_waiting := NULL;
    counted_running := NULL; op := NULL;
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
    IF p_max_waiting[i] IS NOT NULL OR p_max_queued[i] IS NOT NULL THEN
      -- Locked above.
      SELECT q.waiting, q.running INTO v_waiting, v_running FROM queues q
       WHERE q.class = p_class[i] AND q.tenant = p_tenant[i];
      v_waiting := coalesce(v_waiting, 0);
      v_running := coalesce(v_running, 0);
      IF p_max_waiting[i] IS NOT NULL AND v_waiting >= p_max_waiting[i] THEN
        status := 'rejected';
        reason := 'tenant-queue-full';
        counted_waiting := v_waiting;
        counted_running := v_running;
        RETURN NEXT;
        CONTINUE;
      END IF;
      IF p_max_queued[i] IS NOT NULL THEN
        SELECT x.waiting INTO v_class_waiting FROM classes x WHERE x.class = p_class[i];
        v_pos := array_position(c_class, p_class[i]);
        v_class_waiting := coalesce(v_class_waiting, 0) + coalesce(c_delta[v_pos], 0);
        IF v_class_waiting >= p_max_queued[i] THEN
          status := 'rejected';
          reason := 'class-queue-full';
          counted_waiting := v_class_waiting;
          counted_running := v_running;
          RETURN NEXT;
          CONTINUE;
        END IF;
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
    v_pos := array_position(c_class, p_class[i]);
    IF v_pos IS NULL THEN
      c_class := c_class || p_class[i];
      c_delta := c_delta || 1;
    ELSE
      c_delta[v_pos] := c_delta[v_pos] + 1;
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
    FOR k IN
      SELECT DISTINCT u.c COLLATE "C" AS c, u.t COLLATE "C" AS t FROM unnest(d_class, d_tenant) AS u(c, t)
       ORDER BY 1, 2
    LOOP
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
  IF array_length(c_class, 1) > 0 THEN
    PERFORM classes_move(c_class, c_delta);
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
--
-- At the end, and only when something was claimed: the class's waiting count goes down (the one
-- lock a claim waits for), and with `p_bucket_ms`, the first attempts it started (attempt 1
-- after the claim) are counted into the retry budget's bucket of `p_shard`.
DROP FUNCTION claim(text, text, integer, bigint, bigint);
CREATE FUNCTION claim(p_class text, p_owner text, p_limit integer, p_lease_ms bigint, p_now bigint,
                      p_bucket_ms bigint, p_shard integer)
RETURNS SETOF operations
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
DECLARE
  v_seen text[] := '{}';
  v_claimed integer := 0;
  v_firsts integer := 0;
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
      IF r.attempt = 1 THEN
        v_firsts := v_firsts + 1;
      END IF;
      RETURN NEXT r;
    END LOOP;
    FOR k IN 1 .. n LOOP
      UPDATE queues SET running = running + taken[k], waiting = waiting - taken[k], vtime = vt[k],
             ready_at = (SELECT min(o.run_after) FROM operations o
                          WHERE o.class = p_class AND o.tenant = t[k] AND o.state = 'queued')
       WHERE class = p_class AND tenant = t[k];
    END LOOP;
  END LOOP;
  IF v_claimed > 0 THEN
    PERFORM classes_move(ARRAY[p_class], ARRAY[-v_claimed]);
  END IF;
  IF v_firsts > 0 AND p_bucket_ms IS NOT NULL THEN
    PERFORM retry_budget_count(p_now - p_now % p_bucket_ms, p_shard, v_firsts, 0, 0);
  END IF;
END
$$;

-- The end of a batch of attempts (store/sqlite/finish.ts finishOne, same rules), fenced: an
-- item takes effect only while its operation is `running` under the item's epoch. All the
-- operation rows are locked first, in (class, tenant, seq) order, then the items are applied in
-- that order (their queue rows in (class, tenant) order), and the class counters move last.
-- A `failed` end with an effect still `pending` becomes `needs_reconciliation`
-- (core/decisions.ts adjustFailure). A cancel stops the operation only before its point of no
-- return (an effect `pending` or `committed`). `released` and `deferred` go back to the queue
-- without consuming an attempt; `deferred` (a budget said wait) after its delay.
-- Returns the 1-based positions of the items that took effect.
CREATE OR REPLACE FUNCTION finish_many(p_now bigint, p_tenant text[], p_id text[], p_epoch integer[],
                                       p_outcome text[], p_result text[], p_error text[], p_delay_ms bigint[],
                                       p_notify boolean)
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
  c_class text[] := '{}';
  c_delta integer[] := '{}';
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
  -- Every operation row before any queue row: a rescuer holding one of them (it skips locked
  -- rows, never waits for them) may be waiting for a queue row, which this call takes only after.
  FOR j IN 1 .. coalesce(array_length(v_seqs, 1), 0) LOOP
    PERFORM 1 FROM operations x WHERE x.seq = v_seqs[j] FOR UPDATE;
  END LOOP;
  FOR j IN 1 .. coalesce(array_length(v_seqs, 1), 0) LOOP
    v_ord := v_ords[j];
    -- Checked again under the lock: a rescue may have moved it since the lookup. The same lease
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
      WHEN 'retry', 'deferred' THEN
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
        -- A release (shutdown, a cancel that came too late) or a deferral does not consume an attempt.
        attempt = CASE WHEN v_outcome IN ('released', 'deferred') THEN o.attempt - 1 ELSE o.attempt END,
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
      c_class := c_class || o.class;
      c_delta := c_delta || 1;
      IF v_run_after <= v_now AND NOT o.class = ANY (v_ready) THEN
        v_ready := v_ready || o.class;
      END IF;
    ELSE
      PERFORM queue_leave(o.class, o.tenant, 0, 1);
    END IF;
    RETURN NEXT v_ord;
  END LOOP;
  IF array_length(c_class, 1) > 0 THEN
    PERFORM classes_move(c_class, c_delta);
  END IF;
  IF p_notify THEN
    FOREACH v_cls IN ARRAY v_ready LOOP
      PERFORM pg_notify(wakeup_channel(), v_cls);
    END LOOP;
  END IF;
END
$$;

-- Steps 2 and 3 of the effect protocol (store/sqlite/effects.ts effectBegin). In one
-- transaction, under the operation's row lock (the lock cancel takes too, so a cancel and the
-- first effect cannot both win): check the lease and that no cancel is pending; return the row
-- an earlier attempt wrote; else check the operation's request cap (`p_max_calls`: requests of
-- all its effects + 1), draw on the budgets (budget_draw: all or nothing), mark the point of no
-- return and write the `pending` row holding the reservations. A refusal writes nothing.
-- status: 'created' | 'existing' | 'cancel-requested' | 'lease-lost' | 'call-limit' (with
-- `calls` made so far) | 'budget-exhausted' (with `refused_by`, `retry_after`).
DROP FUNCTION effect_begin(bigint, text, text, integer, text, text, text, bigint);
CREATE FUNCTION effect_begin(p_now bigint, p_tenant text, p_id text, p_epoch integer, p_name text, p_key text,
                             p_provider text, p_cost bigint, p_b_key text[], p_b_limit bigint[],
                             p_b_window bigint[], p_b_cost bigint[], p_b_spend boolean[], p_max_calls integer)
RETURNS TABLE (status text, clock bigint, refused_by text, retry_after bigint, calls bigint, eff effects)
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
DECLARE
  o record;
  e effects;
  v_reservations jsonb;
BEGIN
  clock := now_ms(p_now);
  -- Found by its (tenant, id) key, then locked by `seq` (see finish_many on lookups).
  SELECT x.seq, x.epoch, x.state, x.cancel INTO o FROM operations x
   WHERE x.seq = (SELECT y.seq FROM operations y WHERE y.tenant = p_tenant AND y.id = p_id)
     FOR NO KEY UPDATE;
  IF NOT FOUND OR o.epoch <> p_epoch OR o.state <> 'running' THEN
    status := 'lease-lost';
    RETURN NEXT;
    RETURN;
  END IF;
  IF o.cancel IS NOT DISTINCT FROM 'requested' THEN
    status := 'cancel-requested';
    RETURN NEXT;
    RETURN;
  END IF;
  SELECT * INTO e FROM effects x WHERE x.tenant = p_tenant AND x.op_id = p_id AND x.name = p_name;
  IF FOUND THEN
    -- Returned as it is: any further request goes through effect_record_send.
    status := 'existing';
  ELSE
    IF p_max_calls IS NOT NULL THEN
      SELECT coalesce(sum(x.sends), 0) INTO calls FROM effects x WHERE x.tenant = p_tenant AND x.op_id = p_id;
      IF calls + 1 > p_max_calls THEN
        status := 'call-limit';
        RETURN NEXT;
        RETURN;
      END IF;
    END IF;
    IF coalesce(array_length(p_b_key, 1), 0) > 0 THEN
      SELECT d.refused_by, d.retry_after, d.reservations INTO refused_by, retry_after, v_reservations
        FROM budget_draw(clock, p_b_key, p_b_limit, p_b_window, p_b_cost, p_b_spend) d;
      IF refused_by IS NOT NULL THEN
        status := 'budget-exhausted';
        RETURN NEXT;
        RETURN;
      END IF;
    END IF;
    INSERT INTO effects (tenant, op_id, name, key, state, provider, cost, first_sent_at, last_sent_at, sends, epoch,
                         reservations)
    VALUES (p_tenant, p_id, p_name, p_key, 'pending', p_provider, p_cost, clock, clock, 1, p_epoch, v_reservations)
    RETURNING * INTO e;
    status := 'created';
  END IF;
  UPDATE operations SET effect_started_at = coalesce(effect_started_at, clock), updated_at = clock
   WHERE seq = o.seq;
  eff := e;
  RETURN NEXT;
END
$$;

-- One more request under an existing key, `pending` or `absent` (store/sqlite/effects.ts
-- effectRecordSend), under the operation's row lock like effect_begin: the lease, then a pending
-- cancel (it wins over a send from `absent`), then the effect's state, the request cap, and the
-- budgets: every rate charge, and the spend charges only when sending from `absent` (its
-- earlier reservation was released; a `pending` effect still holds its own). From `absent`
-- the retention window restarts now. A refusal writes nothing.
-- status: 'sent' | 'lease-lost' | 'cancel-requested' | 'invalid' (with the effect's state in
-- `was`, NULL when missing) | 'call-limit' | 'budget-exhausted', as effect_begin.
CREATE FUNCTION effect_record_send(p_now bigint, p_tenant text, p_id text, p_epoch integer, p_name text,
                                   p_b_key text[], p_b_limit bigint[], p_b_window bigint[], p_b_cost bigint[],
                                   p_b_spend boolean[], p_max_calls integer)
RETURNS TABLE (status text, clock bigint, refused_by text, retry_after bigint, calls bigint, was text, eff effects)
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
DECLARE
  o record;
  e effects;
  v_key text[];
  v_limit bigint[];
  v_window bigint[];
  v_cost bigint[];
  v_spend boolean[];
  v_reservations jsonb;
BEGIN
  clock := now_ms(p_now);
  SELECT x.seq, x.epoch, x.state, x.cancel INTO o FROM operations x
   WHERE x.seq = (SELECT y.seq FROM operations y WHERE y.tenant = p_tenant AND y.id = p_id)
     FOR NO KEY UPDATE;
  IF NOT FOUND OR o.epoch <> p_epoch OR o.state <> 'running' THEN
    status := 'lease-lost';
    RETURN NEXT;
    RETURN;
  END IF;
  IF o.cancel IS NOT DISTINCT FROM 'requested' THEN
    status := 'cancel-requested';
    RETURN NEXT;
    RETURN;
  END IF;
  SELECT * INTO e FROM effects x WHERE x.tenant = p_tenant AND x.op_id = p_id AND x.name = p_name;
  IF NOT FOUND OR e.state NOT IN ('pending', 'absent') THEN
    status := 'invalid';
    was := e.state;
    RETURN NEXT;
    RETURN;
  END IF;
  IF p_max_calls IS NOT NULL THEN
    SELECT coalesce(sum(x.sends), 0) INTO calls FROM effects x WHERE x.tenant = p_tenant AND x.op_id = p_id;
    IF calls + 1 > p_max_calls THEN
      status := 'call-limit';
      RETURN NEXT;
      RETURN;
    END IF;
  END IF;
  SELECT array_agg(u.k ORDER BY u.ord), array_agg(u.l ORDER BY u.ord), array_agg(u.w ORDER BY u.ord),
         array_agg(u.c ORDER BY u.ord), array_agg(u.s ORDER BY u.ord)
    INTO v_key, v_limit, v_window, v_cost, v_spend
    FROM unnest(p_b_key, p_b_limit, p_b_window, p_b_cost, p_b_spend) WITH ORDINALITY AS u(k, l, w, c, s, ord)
   WHERE NOT u.s OR e.state = 'absent';
  IF coalesce(array_length(v_key, 1), 0) > 0 THEN
    SELECT d.refused_by, d.retry_after, d.reservations INTO refused_by, retry_after, v_reservations
      FROM budget_draw(clock, v_key, v_limit, v_window, v_cost, v_spend) d;
    IF refused_by IS NOT NULL THEN
      status := 'budget-exhausted';
      RETURN NEXT;
      RETURN;
    END IF;
  END IF;
  UPDATE effects x SET sends = x.sends + 1, last_sent_at = clock, epoch = p_epoch, state = 'pending',
         first_sent_at = CASE WHEN x.state = 'absent' THEN clock ELSE x.first_sent_at END,
         reservations = CASE WHEN x.state = 'absent' THEN v_reservations ELSE x.reservations END
   WHERE x.tenant = p_tenant AND x.op_id = p_id AND x.name = p_name
  RETURNING * INTO e;
  status := 'sent';
  eff := e;
  RETURN NEXT;
END
$$;

-- The end of an effect's uncertainty, fenced by a share lock on the operation row held by the
-- lease (a rescuer or claimer changing the row waits for it; after the lease moved on, nothing
-- changes): `absent` (from `pending`: it certainly did not happen), `committed` or `failed`
-- (from `pending` or `absent`). The effect row is locked so its reservations are settled once:
-- committed → reserved becomes committed; absent, failed → released.
-- Returns whether the write took effect.
CREATE FUNCTION effect_mark(p_now bigint, p_tenant text, p_id text, p_epoch integer, p_name text, p_state text,
                            p_result text, p_reference text, p_error text) RETURNS boolean
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
DECLARE
  v_state text;
  v_reservations jsonb;
BEGIN
  PERFORM 1 FROM operations o
   WHERE o.seq = (SELECT x.seq FROM operations x WHERE x.tenant = p_tenant AND x.id = p_id)
     AND o.epoch = p_epoch AND o.state = 'running'
     FOR SHARE;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  SELECT x.state, x.reservations INTO v_state, v_reservations FROM effects x
   WHERE x.tenant = p_tenant AND x.op_id = p_id AND x.name = p_name
     FOR UPDATE;
  IF NOT FOUND OR NOT (v_state = 'pending' OR (v_state = 'absent' AND p_state <> 'absent')) THEN
    RETURN false;
  END IF;
  IF v_reservations IS NOT NULL THEN
    IF p_state = 'committed' THEN
      PERFORM budget_settle(v_reservations, NULL);
    ELSE
      PERFORM budget_settle(NULL, v_reservations);
    END IF;
  END IF;
  IF p_state = 'absent' THEN
    UPDATE effects x SET state = 'absent', epoch = p_epoch, reservations = NULL
     WHERE x.tenant = p_tenant AND x.op_id = p_id AND x.name = p_name;
  ELSE
    UPDATE effects x SET state = p_state, result = p_result, reference = p_reference, error = p_error,
           committed_at = CASE WHEN p_state = 'committed' THEN now_ms(p_now) END, epoch = p_epoch,
           reservations = NULL
     WHERE x.tenant = p_tenant AND x.op_id = p_id AND x.name = p_name;
  END IF;
  RETURN true;
END
$$;
