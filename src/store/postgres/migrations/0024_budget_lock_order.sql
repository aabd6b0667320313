-- Version 24. A batch of the journal's calls locks all its operation rows, then all the budget rows
-- it draws on or settles, in (key, window_start) order, before it draws or settles any: two
-- batches whose items name the same budgets in opposite orders queue on the first row instead of
-- deadlocking.
--
-- Version 2's lock order (0002_admission.sql) takes budget rows "after their operation row, in
-- (key, window_start) order", which holds for one operation's draw (budget_draw) or settlement
-- (budget_settle), not for a batch of them. effect_begin_each (every batch whose effects draw on a
-- budget goes there) ran effect_begin item by item: an operation row, its budget rows, the next
-- operation row, its budget rows; effect_mark_many and effect_mark_each settled item by item too
-- (and so did the ends that carry marks: finish.ts writes them through effect_mark_many). One
-- batch's first item and another's second could hold one budget row each and wait for the other's:
-- the server broke the cycle after `deadlock_timeout` (1 s), the store ran the loser again, and
-- after four such failures its caller got `store-serialization`. Workers whose rounds settle the
-- same budgets met it through the marks; the engine wrote begins that draw on a budget one at a
-- time for this reason, and other callers of a batch met it through the begins. Since this version
-- the engine batches those begins too (effects/journal.ts).
--
-- The order every transaction now takes its row locks in:
--
--   operation rows, in (class, tenant, seq) order
--     → effect rows, in (op_seq, name) order (each only under a lock of its operation row: just
--       marks, which share that lock, can wait for one another's)
--       → budget rows, in (key, window_start) order, all of a transaction's in one pass
--         → queue rows, in (class, tenant) order → class rows → the retry-budget row (version 2)
--
-- No transaction holding a budget row waits for an operation or effect row, and none holding a
-- queue or class row waits for a budget row. A begin or a send writes its effect row after its
-- budget rows, and a reconcile its effect rows in the caller's order, but each under an exclusive
-- lock of the operation row, which no mark of it can share. An end carrying marks locks FOR UPDATE
-- the operation rows its marks share-locked: only marks of the same leases could share them, and
-- an attempt's end waits for its marks in flight (effects/attempt-marks.ts). The other paths
-- already follow the order: effect_begin, effect_record_send and effect_mark (one operation),
-- reconcile (store/postgres/operator.ts: one budget_settle call after the operation row, before
-- the queue and class rows), finish_many (no budget row); claims and the rescuer take operation
-- rows SKIP LOCKED and no budget row.
--
-- Created and recreated, the bodies otherwise those of their latest versions (the migrations
-- before are history and are not edited):
-- - budget_lock (new): locks the budget rows of a set of (key, window_start), in that order, in one
--   statement, creating the missing ones; returns those it created.
-- - effect_begin_each (version 15's): with more than one item, first locks every operation row of
--   the batch (FOR NO KEY UPDATE, as effect_begin does, in lock order), then through budget_lock
--   every budget row an item may draw on; each item then runs through effect_begin as before and
--   finds its rows held. The items share the batch's clock (each read its own, and a window could
--   begin between the locks and an item's draw). Rows the call created that no item drew on are
--   deleted at its end, as budget_draw deletes those of a refusal.
-- - effect_mark_each (version 15's): with more than one item, first share-locks the operation rows
--   (as effect_mark_many does), then locks the effect rows of the leases that hold in (op_seq,
--   name) order, then the budget rows their reservations name; each item then runs through
--   effect_mark as before.
-- - effect_mark_many (version 20's): what its items settle is settled in one budget_settle call,
--   commits and releases together, each row once, in (key, window_start) order, instead of one
--   call per item.

-- Locks the budget rows (p_key[i], p_start[i]) in (key, window_start) order, each once, creating a
-- missing one (zeros, `p_window` its window's length) in its place in that order, as budget_draw
-- does row by row. An existing row is locked by the conflict's DO UPDATE, whose WHERE false changes
-- nothing (the row is locked all the same); the update names a key column, so the lock is the one
-- FOR UPDATE takes, which budget_draw asks for after it. Returns the rows it created.
CREATE FUNCTION budget_lock(p_key text[], p_start bigint[], p_window bigint[])
 RETURNS TABLE(new_key text, new_start bigint)
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
AS $$
BEGIN
  RETURN QUERY
    INSERT INTO budgets AS b (key, window_start, window_ms)
    SELECT DISTINCT ON (1, 2) u.k COLLATE "C", u.ws, u.wm
      FROM unnest(p_key, p_start, p_window) AS u(k, ws, wm)
     ORDER BY 1, 2
    ON CONFLICT (key, window_start) DO UPDATE SET key = excluded.key WHERE false
    RETURNING b.key, b.window_start;
END
$$
;

CREATE OR REPLACE FUNCTION effect_begin_each(p_now bigint, p_items jsonb)
 RETURNS TABLE(ord integer, status text, clock bigint, refused_by text, retry_after bigint, calls bigint, eff effects)
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
AS $$
DECLARE
  it jsonb;
  i integer := 0;
  v_clock bigint := now_ms(p_now);
  r record;
  -- Every charge of the batch: its item, its budget row, the window's length.
  c_n integer[];
  c_key text[];
  c_start bigint[];
  c_window bigint[];
  -- The budget rows this call created; the items that drew.
  n_key text[];
  n_start bigint[];
  d_n integer[] := '{}';
BEGIN
  IF jsonb_array_length(p_items) > 1 THEN
    -- Every operation row, in lock order (each item's own lock finds its row held). One lookup
    -- per item on the (tenant, id) key (OFFSET 0 keeps it one whatever the generic plan), then
    -- the rows by `seq`.
    PERFORM 1 FROM operations o
     WHERE o.seq = ANY (ARRAY(SELECT f.seq FROM jsonb_to_recordset(p_items) AS u(tenant text, id text)
                               CROSS JOIN LATERAL (SELECT x.seq FROM operations x
                                                    WHERE x.tenant = u.tenant AND x.id = u.id OFFSET 0) f))
     ORDER BY o.class, o.tenant, o.seq
       FOR NO KEY UPDATE;
    -- ... then every budget row an item may draw on, in (key, window_start) order.
    SELECT array_agg(e.n::integer), array_agg(c.key), array_agg(v_clock - v_clock % c.wm::bigint),
           array_agg(c.wm::bigint)
      INTO c_n, c_key, c_start, c_window
      FROM jsonb_array_elements(p_items) WITH ORDINALITY AS e(it, n)
     CROSS JOIN LATERAL ROWS FROM (jsonb_array_elements_text(coalesce(e.it->'bKey', '[]')),
                                   jsonb_array_elements_text(coalesce(e.it->'bWindow', '[]'))) AS c(key, wm);
    IF cardinality(c_key) > 0 THEN
      SELECT array_agg(l.new_key), array_agg(l.new_start) INTO n_key, n_start
        FROM budget_lock(c_key, c_start, c_window) l;
    END IF;
  END IF;
  FOR it IN SELECT e.value FROM jsonb_array_elements(p_items) WITH ORDINALITY AS e(value, n) ORDER BY e.n LOOP
    i := i + 1;
    SELECT b.status, b.clock, b.refused_by, b.retry_after, b.calls, b.eff INTO r
      FROM effect_begin(
             v_clock, it->>'tenant', it->>'id', (it->>'epoch')::bigint, it->>'name', it->>'key',
             it->>'provider', (it->>'cost')::bigint,
             ARRAY(SELECT jsonb_array_elements_text(it->'bKey')),
             ARRAY(SELECT jsonb_array_elements_text(it->'bLimit')::bigint),
             ARRAY(SELECT jsonb_array_elements_text(it->'bWindow')::bigint),
             ARRAY(SELECT jsonb_array_elements_text(it->'bCost')::bigint),
             ARRAY(SELECT jsonb_array_elements_text(it->'bSpend')::boolean),
             (it->>'maxCalls')::integer) b;
    ord := i;
    status := r.status;
    clock := r.clock;
    refused_by := r.refused_by;
    retry_after := r.retry_after;
    calls := r.calls;
    eff := r.eff;
    RETURN NEXT;
    IF r.status = 'created' THEN
      d_n := d_n || i;
    END IF;
  END LOOP;
  IF cardinality(n_key) > 0 THEN
    -- Created here and drawn on by no item (each refused, or wrote nothing): still zeros, seen
    -- by no one.
    DELETE FROM budgets b
     USING unnest(n_key, n_start) AS x(key, ws)
     WHERE b.key = x.key COLLATE "C" AND b.window_start = x.ws
       AND NOT EXISTS (SELECT 1 FROM unnest(c_n, c_key, c_start) AS c(n, key, ws)
                        WHERE c.n = ANY (d_n) AND c.key = x.key AND c.ws = x.ws);
  END IF;
END
$$
;

CREATE OR REPLACE FUNCTION effect_mark_each(p_now bigint, p_items jsonb)
 RETURNS TABLE(ord integer, ok boolean)
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
AS $$
DECLARE
  it jsonb;
  i integer := 0;
  v_res jsonb[];
BEGIN
  IF jsonb_array_length(p_items) > 1 THEN
    -- The fences, in lock order (each item's own finds its row held), found as effect_begin_each
    -- finds its rows ...
    PERFORM 1 FROM operations o
     WHERE o.seq = ANY (ARRAY(SELECT f.seq FROM jsonb_to_recordset(p_items) AS u(tenant text, id text)
                               CROSS JOIN LATERAL (SELECT x.seq FROM operations x
                                                    WHERE x.tenant = u.tenant AND x.id = u.id OFFSET 0) f))
       AND o.state = 'running'
     ORDER BY o.class, o.tenant, o.seq
       FOR SHARE;
    -- ... then the effect rows of the leases that hold, one by one in key order ...
    SELECT array_agg(f.reservations) INTO v_res
      FROM (SELECT h.seq, u.name
              FROM jsonb_to_recordset(p_items) AS u(tenant text, id text, epoch bigint, name text)
             CROSS JOIN LATERAL (SELECT x.seq FROM operations x
                                  WHERE x.tenant = u.tenant AND x.id = u.id AND x.epoch = u.epoch
                                    AND x.state = 'running' OFFSET 0) h
             ORDER BY h.seq, u.name) v
     CROSS JOIN LATERAL (SELECT e.reservations FROM effects e
                          WHERE e.op_seq = v.seq AND e.name = v.name
                            FOR UPDATE) f;
    -- ... then the budget rows their reservations name, one by one in (key, window_start) order.
    PERFORM 1
       FROM (SELECT DISTINCT x.key COLLATE "C" AS key, x."windowStart" AS ws
               FROM unnest(v_res) AS h(res)
              CROSS JOIN LATERAL jsonb_to_recordset(h.res) AS x(key text, "windowStart" bigint)
              ORDER BY 1, 2) r
      CROSS JOIN LATERAL (SELECT 1 FROM budgets b
                           WHERE b.key = r.key AND b.window_start = r.ws
                             FOR UPDATE) l;
  END IF;
  FOR it IN SELECT e.value FROM jsonb_array_elements(p_items) WITH ORDINALITY AS e(value, n) ORDER BY e.n LOOP
    i := i + 1;
    ord := i;
    ok := effect_mark(p_now, it->>'tenant', it->>'id', (it->>'epoch')::bigint, it->>'name', it->>'state',
                      it->>'result', it->>'reference', it->>'error');
    RETURN NEXT;
  END LOOP;
END
$$
;

CREATE OR REPLACE FUNCTION effect_mark_many(p_now bigint, p_items jsonb)
 RETURNS TABLE(ord integer, ok boolean)
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
AS $$
DECLARE
  v_n integer;
  v_clock bigint;
  a_tenant text[];
  a_id text[];
  a_epoch bigint[];
  a_name text[];
  a_state text[];
  a_result text[];
  a_reference text[];
  a_error text[];
  a_ok boolean[];
  a_seq bigint[];
  a_held boolean[];
  a_was text[];
  a_res jsonb[];
  -- What the items settle: reservations committed, and released.
  v_commit jsonb;
  v_release jsonb;
  k record;
BEGIN
  SELECT array_agg(x.tenant ORDER BY x.n), array_agg(x.id ORDER BY x.n), array_agg(x.epoch ORDER BY x.n),
         array_agg(x.name ORDER BY x.n), array_agg(x.state ORDER BY x.n), array_agg(x.result ORDER BY x.n),
         array_agg(x.reference ORDER BY x.n), array_agg(x.error ORDER BY x.n), count(*)::integer
    INTO a_tenant, a_id, a_epoch, a_name, a_state, a_result, a_reference, a_error, v_n
    FROM ROWS FROM (jsonb_to_recordset(p_items)
                    AS (tenant text, id text, epoch bigint, name text, state text, result text, reference text,
                        error text))
         WITH ORDINALITY AS x(tenant, id, epoch, name, state, result, reference, error, n);
  IF v_n = 0 THEN
    RETURN;
  END IF;
  -- An effect named twice must see its own earlier item: item by item; a single item too
  -- (cheaper that way).
  IF v_n = 1 OR (SELECT count(DISTINCT (u.t, u.i, u.m)) FROM unnest(a_tenant, a_id, a_name) AS u(t, i, m)) < v_n THEN
    RETURN QUERY SELECT * FROM effect_mark_each(p_now, p_items);
    RETURN;
  END IF;

  v_clock := now_ms(p_now);
  -- The fence: each item's operation, found by key and share-locked in lock order, in one
  -- statement; held when it runs under the item's epoch.
  a_held := array_fill(false, ARRAY[v_n]);
  a_seq := array_fill(NULL::bigint, ARRAY[v_n]);
  FOR k IN
    SELECT u.n::integer AS n, o.seq, o.epoch
      FROM unnest(a_tenant, a_id) WITH ORDINALITY AS u(tenant, id, n)
      JOIN operations o ON o.tenant = u.tenant AND o.id = u.id
     WHERE o.state = 'running'
     ORDER BY o.class, o.tenant, o.seq
       FOR SHARE OF o
  LOOP
    a_held[k.n] := k.epoch = a_epoch[k.n];
    a_seq[k.n] := k.seq;
  END LOOP;

  -- The effect rows, locked one by one in key order, through the key (the operation's seq and the
  -- effect's name).
  a_was := array_fill(NULL::text, ARRAY[v_n]);
  a_res := array_fill(NULL::jsonb, ARRAY[v_n]);
  FOR k IN
    SELECT u.n::integer AS n, f.state, f.reservations
      FROM (SELECT * FROM unnest(a_seq, a_name, a_held) WITH ORDINALITY AS v(seq, name, held, n)
             WHERE v.held ORDER BY v.seq, v.name) u
     CROSS JOIN LATERAL (SELECT e.state, e.reservations FROM effects e
                          WHERE e.op_seq = u.seq AND e.name = u.name
                            FOR UPDATE) f
  LOOP
    a_was[k.n] := k.state;
    a_res[k.n] := k.reservations;
  END LOOP;

  a_ok := array_fill(false, ARRAY[v_n]);
  FOR j IN 1 .. v_n LOOP
    CONTINUE WHEN NOT a_held[j] OR a_was[j] IS NULL;
    CONTINUE WHEN NOT (a_was[j] = 'pending' OR (a_was[j] = 'absent' AND a_state[j] <> 'absent'));
    a_ok[j] := true;
    IF a_res[j] IS NOT NULL THEN
      IF a_state[j] = 'committed' THEN
        v_commit := coalesce(v_commit, '[]') || a_res[j];
      ELSE
        v_release := coalesce(v_release, '[]') || a_res[j];
      END IF;
    END IF;
  END LOOP;
  -- All in one call: each budget row once, in (key, window_start) order.
  IF v_commit IS NOT NULL OR v_release IS NOT NULL THEN
    PERFORM budget_settle(v_commit, v_release);
  END IF;

  UPDATE effects x SET
      state = u.state,
      result = CASE WHEN u.state = 'absent' THEN x.result ELSE u.result END,
      reference = CASE WHEN u.state = 'absent' THEN x.reference ELSE u.reference END,
      error = CASE WHEN u.state = 'absent' THEN x.error ELSE u.error END,
      committed_at = CASE WHEN u.state = 'absent' THEN x.committed_at
                          WHEN u.state = 'committed' THEN v_clock END,
      epoch = u.epoch,
      reservations = NULL
    FROM unnest(a_seq, a_name, a_epoch, a_state, a_result, a_reference, a_error, a_ok)
         AS u(seq, name, epoch, state, result, reference, error, ok)
   WHERE u.ok AND x.op_seq = u.seq AND x.name = u.name;

  RETURN QUERY SELECT u.n::integer, u.ok FROM unnest(a_ok) WITH ORDINALITY AS u(ok, n) ORDER BY u.n;
END
$$
;
