-- Set-based hot paths, version 4. Versions 2 and 3 batch the worker's writes into one round trip
-- and one commit, but inside the batch functions each item still ran its own statements (and its
-- own nested function call): a batch of 32 effect begins was 32 × 4 statements, and the
-- server's CPU per operation, not the commit, bounded the throughput. These versions take every
-- lock and write every row of a batch with a handful of statements over arrays, and decide each
-- item's answer in PL/pgSQL between them. The rules, the answers and the lock order are those of
-- the versions they replace; where a batch has a shape the set-based version does not handle
-- (a single item, an effect that draws on a budget, one operation or effect named twice) they
-- call the item-by-item version, kept under a new name (`*_each`), unchanged. A single submit
-- has its own function (submit_one, at the end).
--
-- Lookups by (tenant, id) keep the shape of version 1 (a lateral subquery with OFFSET 0 on the
-- key); rows are then locked and updated by `seq = ANY (array)` (an index condition on the
-- primary key), so no generic plan can turn them into a scan.

-- The effect journal's `pending` → final update changes no indexed column: room on the page lets
-- it be a HOT update (no index entries written). Applies to pages written from now on.
ALTER TABLE effects SET (fillfactor = 80);

-- Steps 2 and 3 of the effect protocol for a batch (effect_begin's rules, item by item):
-- 'lease-lost', 'cancel-requested', 'existing' (the row an earlier attempt wrote), 'call-limit'
-- (requests of all the operation's effects + 1 over `maxCalls`), else 'created' (`pending`
-- written, the point of no return marked on the operation).
-- Locks: the operation rows, FOR NO KEY UPDATE, in (class, tenant, seq) order, the order of
-- finish_many and lease_extend.
ALTER FUNCTION effect_begin_many(bigint, jsonb) RENAME TO effect_begin_each;
CREATE FUNCTION effect_begin_many(p_now bigint, p_items jsonb)
RETURNS TABLE (ord integer, status text, clock bigint, refused_by text, retry_after bigint, calls bigint,
               eff effects)
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
DECLARE
  v_clock bigint;
  v_n integer;
  -- Per item, in item order.
  a_tenant text[];
  a_id text[];
  a_epoch integer[];
  a_name text[];
  a_key text[];
  a_provider text[];
  a_cost bigint[];
  a_max integer[];
  a_status text[];
  a_calls bigint[];
  -- Per item, what the locked operation row says (NULL when missing).
  o_seq bigint[];
  o_epoch integer[];
  o_state text[];
  o_cancel text[];
  k record;
  c_ord integer[] := '{}';
  -- Whether an item draws on a budget.
  v_budgeted boolean;
BEGIN
  SELECT array_agg(x.tenant ORDER BY x.n), array_agg(x.id ORDER BY x.n), array_agg(x.epoch ORDER BY x.n),
         array_agg(x.name ORDER BY x.n), array_agg(x.key ORDER BY x.n), array_agg(x.provider ORDER BY x.n),
         array_agg(x.cost ORDER BY x.n), array_agg(x.max_calls ORDER BY x.n), count(*)::integer,
         coalesce(bool_or(jsonb_array_length(coalesce(x.b_key, '[]')) > 0), false)
    INTO a_tenant, a_id, a_epoch, a_name, a_key, a_provider, a_cost, a_max, v_n, v_budgeted
    FROM ROWS FROM (jsonb_to_recordset(p_items)
                    AS (tenant text, id text, epoch integer, name text, key text, provider text, cost bigint,
                        "maxCalls" integer, "bKey" jsonb))
         WITH ORDINALITY AS x(tenant, id, epoch, name, key, provider, cost, max_calls, b_key, n);
  IF v_n = 0 THEN
    RETURN;
  END IF;
  -- Budget draws lock budget rows per item, in item order; an operation named twice must see its
  -- own earlier item. Both go item by item, and so does a single item (cheaper that way).
  IF v_n = 1 OR v_budgeted
     OR (SELECT count(DISTINCT (u.t, u.i)) FROM unnest(a_tenant, a_id) AS u(t, i)) < v_n THEN
    RETURN QUERY SELECT * FROM effect_begin_each(p_now, p_items);
    RETURN;
  END IF;

  v_clock := now_ms(p_now);
  -- The rows by key first, then locked by `seq` in lock order (each lock returns the row's latest
  -- version, which is what the checks below read).
  SELECT array_agg(f.seq ORDER BY u.n) INTO o_seq
    FROM unnest(a_tenant, a_id) WITH ORDINALITY AS u(tenant, id, n)
    LEFT JOIN LATERAL (SELECT y.seq FROM operations y WHERE y.tenant = u.tenant AND y.id = u.id OFFSET 0) f ON true;
  o_epoch := array_fill(NULL::integer, ARRAY[v_n]);
  o_state := array_fill(NULL::text, ARRAY[v_n]);
  o_cancel := array_fill(NULL::text, ARRAY[v_n]);
  FOR k IN
    SELECT u.n::integer AS n, o.epoch, o.state, o.cancel
      FROM operations o JOIN unnest(o_seq) WITH ORDINALITY AS u(seq, n) ON u.seq = o.seq
     WHERE o.seq = ANY (o_seq)
     ORDER BY o.class, o.tenant, o.seq
       FOR NO KEY UPDATE OF o
  LOOP
    o_epoch[k.n] := k.epoch;
    o_state[k.n] := k.state;
    o_cancel[k.n] := k.cancel;
  END LOOP;

  -- Existing journal rows and requests made so far, per item (under the operation's lock).
  SELECT array_agg(s.found ORDER BY s.n), array_agg(s.sends ORDER BY s.n) INTO a_status, a_calls
    FROM (SELECT u.n,
                 CASE WHEN EXISTS (SELECT 1 FROM effects e WHERE e.tenant = u.tenant AND e.op_id = u.id
                                                             AND e.name = u.name)
                      THEN 'existing' END AS found,
                 CASE WHEN u.mx IS NOT NULL
                      THEN (SELECT coalesce(sum(e.sends), 0) FROM effects e WHERE e.tenant = u.tenant AND e.op_id = u.id)
                 END AS sends
            FROM unnest(a_tenant, a_id, a_name, a_max) WITH ORDINALITY AS u(tenant, id, name, mx, n)) s;

  FOR j IN 1 .. v_n LOOP
    IF o_state[j] IS NULL OR o_epoch[j] <> a_epoch[j] OR o_state[j] <> 'running' THEN
      a_status[j] := 'lease-lost';
    ELSIF o_cancel[j] IS NOT DISTINCT FROM 'requested' THEN
      a_status[j] := 'cancel-requested';
    ELSIF a_status[j] IS NULL THEN
      IF a_max[j] IS NOT NULL AND a_calls[j] + 1 > a_max[j] THEN
        a_status[j] := 'call-limit';
      ELSE
        a_status[j] := 'created';
        c_ord := c_ord || j;
      END IF;
    END IF;
  END LOOP;

  IF cardinality(c_ord) > 0 THEN
    INSERT INTO effects (tenant, op_id, name, key, state, provider, cost, first_sent_at, last_sent_at, sends, epoch)
    SELECT a_tenant[j], a_id[j], a_name[j], a_key[j], 'pending', a_provider[j], a_cost[j], v_clock, v_clock, 1,
           a_epoch[j]
      FROM unnest(c_ord) AS j;
  END IF;
  UPDATE operations o SET effect_started_at = coalesce(o.effect_started_at, v_clock), updated_at = v_clock
   WHERE o.seq = ANY (ARRAY(SELECT u.seq FROM unnest(o_seq, a_status) AS u(seq, st)
                             WHERE u.st IN ('created', 'existing')));

  RETURN QUERY
    SELECT u.n::integer, u.st, v_clock, NULL::text, NULL::bigint,
           CASE WHEN u.st = 'call-limit' THEN u.sends END, e
      FROM unnest(a_tenant, a_id, a_name, a_status, a_calls) WITH ORDINALITY AS u(tenant, id, name, st, sends, n)
      LEFT JOIN LATERAL (SELECT x FROM effects x
                          WHERE u.st IN ('created', 'existing') AND x.tenant = u.tenant AND x.op_id = u.id
                            AND x.name = u.name OFFSET 0) f(e) ON true
     ORDER BY u.n;
END
$$;

-- The end of a batch of effects' uncertainty (effect_mark's rules, item by item): fenced by a
-- share lock on each operation row held by the lease; `absent` only from `pending`, `committed`
-- or `failed` from `pending` or `absent`; reservations settled once. Locks: the operation rows
-- FOR SHARE in (class, tenant, seq) order, then the effect rows FOR UPDATE in key order.
ALTER FUNCTION effect_mark_many(bigint, jsonb) RENAME TO effect_mark_each;
CREATE FUNCTION effect_mark_many(p_now bigint, p_items jsonb)
RETURNS TABLE (ord integer, ok boolean)
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
DECLARE
  v_n integer;
  v_clock bigint;
  a_tenant text[];
  a_id text[];
  a_epoch integer[];
  a_name text[];
  a_state text[];
  a_result text[];
  a_reference text[];
  a_error text[];
  a_ok boolean[];
  a_held boolean[];
  a_was text[];
  a_res jsonb[];
  a_seq bigint[];
  k record;
BEGIN
  SELECT array_agg(x.tenant ORDER BY x.n), array_agg(x.id ORDER BY x.n), array_agg(x.epoch ORDER BY x.n),
         array_agg(x.name ORDER BY x.n), array_agg(x.state ORDER BY x.n), array_agg(x.result ORDER BY x.n),
         array_agg(x.reference ORDER BY x.n), array_agg(x.error ORDER BY x.n), count(*)::integer
    INTO a_tenant, a_id, a_epoch, a_name, a_state, a_result, a_reference, a_error, v_n
    FROM ROWS FROM (jsonb_to_recordset(p_items)
                    AS (tenant text, id text, epoch integer, name text, state text, result text, reference text,
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
  SELECT array_agg(f.seq ORDER BY u.n) INTO a_seq
    FROM unnest(a_tenant, a_id) WITH ORDINALITY AS u(tenant, id, n)
    LEFT JOIN LATERAL (SELECT y.seq FROM operations y WHERE y.tenant = u.tenant AND y.id = u.id OFFSET 0) f ON true;
  a_held := array_fill(false, ARRAY[v_n]);
  FOR k IN
    SELECT u.n::integer AS n, o.epoch
      FROM operations o JOIN unnest(a_seq) WITH ORDINALITY AS u(seq, n) ON u.seq = o.seq
     WHERE o.seq = ANY (a_seq) AND o.state = 'running'
     ORDER BY o.class, o.tenant, o.seq
       FOR SHARE OF o
  LOOP
    a_held[k.n] := k.epoch = a_epoch[k.n];
  END LOOP;

  -- The effect rows, locked one by one in key order, through the key.
  a_was := array_fill(NULL::text, ARRAY[v_n]);
  a_res := array_fill(NULL::jsonb, ARRAY[v_n]);
  FOR k IN
    SELECT u.n::integer AS n, f.state, f.reservations
      FROM (SELECT * FROM unnest(a_tenant, a_id, a_name, a_held) WITH ORDINALITY AS v(tenant, id, name, held, n)
             WHERE v.held ORDER BY v.tenant, v.id, v.name) u
     CROSS JOIN LATERAL (SELECT e.state, e.reservations FROM effects e
                          WHERE e.tenant = u.tenant AND e.op_id = u.id AND e.name = u.name
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
        PERFORM budget_settle(a_res[j], NULL);
      ELSE
        PERFORM budget_settle(NULL, a_res[j]);
      END IF;
    END IF;
  END LOOP;

  UPDATE effects x SET
      state = u.state,
      result = CASE WHEN u.state = 'absent' THEN x.result ELSE u.result END,
      reference = CASE WHEN u.state = 'absent' THEN x.reference ELSE u.reference END,
      error = CASE WHEN u.state = 'absent' THEN x.error ELSE u.error END,
      committed_at = CASE WHEN u.state = 'absent' THEN x.committed_at
                          WHEN u.state = 'committed' THEN v_clock END,
      epoch = u.epoch,
      reservations = NULL
    FROM unnest(a_tenant, a_id, a_name, a_epoch, a_state, a_result, a_reference, a_error, a_ok)
         AS u(tenant, id, name, epoch, state, result, reference, error, ok)
   WHERE u.ok AND x.tenant = u.tenant AND x.op_id = u.id AND x.name = u.name;

  RETURN QUERY SELECT u.n::integer, u.ok FROM unnest(a_ok) WITH ORDINALITY AS u(ok, n) ORDER BY u.n;
END
$$;

-- The claim (version 2's rules, unchanged): a round's operations are started by one UPDATE over
-- the picked `seq`s (already locked, SKIP LOCKED) instead of one UPDATE each.
CREATE OR REPLACE FUNCTION claim(p_class text, p_owner text, p_limit integer, p_lease_ms bigint, p_now bigint,
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
  -- Per candidate of a round: tenant, virtual time, weight, its operations (offset, count), taken.
  t text[];
  vt double precision[];
  w double precision[];
  off integer[];
  cnt integer[];
  taken integer[];
  ops bigint[];
  -- The operations a round serves, in service order.
  v_pick bigint[];
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
    v_pick := '{}';
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
      v_pick := v_pick || ops[off[best] + taken[best]];
      v_claimed := v_claimed + 1;
    END LOOP;
    -- The round's picks start in one statement, returned in the order they were served.
    RETURN QUERY
      WITH started AS (
        UPDATE operations o SET state = 'running', attempt = o.attempt + 1, epoch = o.epoch + 1,
               started_at = p_now, lease_owner = p_owner, lease_expires_at = p_now + p_lease_ms,
               updated_at = p_now
         WHERE o.seq = ANY (v_pick)
        RETURNING o.*)
      SELECT s.* FROM started s JOIN unnest(v_pick) WITH ORDINALITY AS u(seq, n) ON u.seq = s.seq ORDER BY u.n;
    IF p_bucket_ms IS NOT NULL THEN
      -- First attempts: attempt 1 after the update (the picks are locked; no one else moved them).
      SELECT v_firsts + count(*) INTO v_firsts FROM operations o WHERE o.seq = ANY (v_pick) AND o.attempt = 1;
    END IF;
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

-- The end of a batch of attempts (version 2's rules and answers, item by item). The operation rows
-- are locked in one statement, in (class, tenant, seq) order; each item's end is decided from its
-- locked row and its effects' states; then one UPDATE ends them all, one INSERT writes their
-- attempt rows, and the queue counters move once per (class, tenant), in that order, before the
-- class counters (last). The same lease named twice: the first item ends the attempt, the next
-- finds it no longer running.
CREATE OR REPLACE FUNCTION finish_many(p_now bigint, p_tenant text[], p_id text[], p_epoch integer[],
                                       p_outcome text[], p_result text[], p_error text[], p_delay_ms bigint[],
                                       p_notify boolean)
RETURNS SETOF integer
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
DECLARE
  v_now bigint := now_ms(p_now);
  v_seqs bigint[];
  v_last bigint;
  o record;
  v_pending boolean;
  v_no_return boolean;
  v_cancel_asked boolean;
  v_to text;
  v_outcome text;
  v_error text;
  v_result text;
  v_delay bigint;
  v_run_after bigint;
  v_ready text[] := '{}';
  v_cls text;
  g record;
  -- Per ended item, in lock order.
  e_ord integer[] := '{}';
  e_seq bigint[] := '{}';
  e_class text[] := '{}';
  e_tenant text[] := '{}';
  e_to text[] := '{}';
  e_attempt integer[] := '{}';
  e_run_after bigint[] := '{}';
  e_result text[] := '{}';
  e_error text[] := '{}';
  e_cancel text[] := '{}';
  e_requeue boolean[] := '{}';
  -- Their attempt rows.
  t_tenant text[] := '{}';
  t_id text[] := '{}';
  t_epoch integer[] := '{}';
  t_attempt integer[] := '{}';
  t_owner text[] := '{}';
  t_started bigint[] := '{}';
  t_outcome text[] := '{}';
  t_delay bigint[] := '{}';
  c_class text[] := '{}';
  c_delta integer[] := '{}';
BEGIN
  -- The operations by key (see version 1 on lookups), then locked by `seq`. A row appears once
  -- per item naming its lease, its items in order.
  SELECT array_agg(f.seq ORDER BY u.n) INTO v_seqs
    FROM unnest(p_tenant, p_id) WITH ORDINALITY AS u(tenant, id, n)
    LEFT JOIN LATERAL (SELECT x.seq FROM operations x WHERE x.tenant = u.tenant AND x.id = u.id OFFSET 0) f ON true;
  PERFORM 1
     FROM operations x
     JOIN unnest(v_seqs, p_epoch) AS u(seq, epoch) ON u.seq = x.seq AND u.epoch = x.epoch
    WHERE x.seq = ANY (v_seqs) AND x.state = 'running'
    ORDER BY x.class, x.tenant, x.seq
      FOR UPDATE OF x;
  -- Read again by a new statement, under the locks: a rescue may have moved a row since the lookup.
  FOR o IN
    SELECT u.n::integer AS ord, x.seq, x.class, x.tenant, x.id, x.epoch, x.attempt, x.run_after, x.started_at,
           x.lease_owner, x.cancel, x.error,
           EXISTS (SELECT 1 FROM effects e WHERE e.tenant = x.tenant AND e.op_id = x.id AND e.state = 'pending')
             AS pending,
           EXISTS (SELECT 1 FROM effects e WHERE e.tenant = x.tenant AND e.op_id = x.id
                                             AND e.state IN ('pending', 'committed')) AS no_return
      FROM operations x
      JOIN unnest(v_seqs, p_epoch) WITH ORDINALITY AS u(seq, epoch, n) ON u.seq = x.seq AND u.epoch = x.epoch
     WHERE x.seq = ANY (v_seqs) AND x.state = 'running'
     ORDER BY x.class, x.tenant, x.seq, u.n
  LOOP
    CONTINUE WHEN o.seq = v_last;
    v_last := o.seq;
    v_pending := o.pending;
    v_no_return := o.no_return;
    v_cancel_asked := o.cancel IS NOT DISTINCT FROM 'requested' AND NOT v_no_return;
    v_outcome := p_outcome[o.ord];
    v_error := NULL;
    v_result := NULL;
    v_delay := NULL;
    CASE v_outcome
      WHEN 'succeeded' THEN
        v_to := 'succeeded';
        v_result := p_result[o.ord];
      WHEN 'failed' THEN
        v_to := CASE WHEN v_pending THEN 'needs_reconciliation' ELSE 'failed' END;
        v_error := p_error[o.ord];
      WHEN 'dead', 'needs_reconciliation' THEN
        v_to := v_outcome;
        v_error := p_error[o.ord];
      WHEN 'retry', 'deferred' THEN
        v_to := CASE WHEN v_cancel_asked THEN 'cancelled' ELSE 'queued' END;
        v_error := p_error[o.ord];
        IF v_to = 'queued' THEN v_delay := greatest(0, p_delay_ms[o.ord]); END IF;
      WHEN 'cancelled' THEN
        -- Past the point of no return the operation cannot end cancelled: it runs again.
        v_to := CASE WHEN v_no_return THEN 'queued' ELSE 'cancelled' END;
        IF v_to = 'queued' THEN v_outcome := 'released'; END IF;
      WHEN 'released' THEN
        v_to := CASE WHEN v_cancel_asked THEN 'cancelled' ELSE 'queued' END;
    END CASE;
    v_run_after := CASE WHEN v_to = 'queued' THEN v_now + coalesce(v_delay, 0) ELSE o.run_after END;
    e_ord := e_ord || o.ord;
    e_seq := e_seq || o.seq;
    e_class := e_class || o.class;
    e_tenant := e_tenant || o.tenant;
    e_to := e_to || v_to;
    -- A release (shutdown, a cancel that came too late) or a deferral does not consume an attempt.
    e_attempt := e_attempt || CASE WHEN v_outcome IN ('released', 'deferred') THEN o.attempt - 1 ELSE o.attempt END;
    e_run_after := e_run_after || v_run_after;
    e_result := e_result || v_result;
    -- The last error stays visible while the operation waits to retry; success clears it.
    e_error := e_error || CASE WHEN v_to = 'succeeded' THEN NULL ELSE coalesce(v_error, o.error) END;
    -- A cancel that did not stop the operation is answered too late, also when it goes back to
    -- the queue: `requested` is an open question only while the operation runs.
    e_cancel := e_cancel || CASE WHEN o.cancel = 'requested' AND v_to <> 'cancelled' THEN 'too_late' ELSE o.cancel END;
    e_requeue := e_requeue || (v_to = 'queued');
    t_tenant := t_tenant || o.tenant;
    t_id := t_id || o.id;
    t_epoch := t_epoch || o.epoch;
    t_attempt := t_attempt || o.attempt;
    t_owner := t_owner || o.lease_owner;
    t_started := t_started || coalesce(o.started_at, v_now);
    t_outcome := t_outcome || CASE WHEN v_outcome = 'retry' AND v_to = 'cancelled' THEN 'cancelled' ELSE v_outcome END;
    t_delay := t_delay || v_delay;
    IF v_to = 'queued' THEN
      c_class := c_class || o.class;
      c_delta := c_delta || 1;
      IF v_run_after <= v_now AND NOT o.class = ANY (v_ready) THEN
        v_ready := v_ready || o.class;
      END IF;
    END IF;
  END LOOP;
  IF cardinality(e_seq) = 0 THEN
    RETURN;
  END IF;

  UPDATE operations x SET
      state = u.st,
      attempt = u.att,
      run_after = u.ra,
      result = u.res,
      error = u.err,
      finished_at = CASE WHEN u.rq THEN NULL ELSE v_now END,
      updated_at = v_now,
      lease_owner = NULL,
      lease_expires_at = NULL,
      cancel = u.can
    FROM unnest(e_seq, e_to, e_attempt, e_run_after, e_result, e_error, e_cancel, e_requeue)
         AS u(seq, st, att, ra, res, err, can, rq)
   WHERE x.seq = ANY (e_seq) AND x.seq = u.seq;

  INSERT INTO attempts (tenant, op_id, epoch, attempt, owner, started_at, ended_at, outcome, error, retry_delay_ms)
  SELECT u.tenant, u.id, u.epoch, u.attempt, u.owner, u.started, v_now, u.outcome, u.err, u.delay
    FROM unnest(t_tenant, t_id, t_epoch, t_attempt, t_owner, t_started, t_outcome, e_error, e_to, t_delay)
         AS u(tenant, id, epoch, attempt, owner, started, outcome, err, st, delay);

  -- The queue counters, once per (class, tenant), in that order: every ended item left
  -- `running`; the requeued ones enter `queued` again.
  FOR g IN
    SELECT u.c COLLATE "C" AS c, u.t COLLATE "C" AS t, count(*)::integer AS n,
           (count(*) FILTER (WHERE u.rq))::integer AS nq, min(u.ra) FILTER (WHERE u.rq) AS ra
      FROM unnest(e_class, e_tenant, e_requeue, e_run_after) AS u(c, t, rq, ra)
     GROUP BY 1, 2
     ORDER BY 1, 2
  LOOP
    IF g.nq > 0 THEN
      PERFORM queue_enter(g.c, g.t, g.nq, g.ra, g.n, false, 1, NULL, NULL);
    ELSE
      PERFORM queue_leave(g.c, g.t, 0, g.n);
    END IF;
  END LOOP;
  IF cardinality(c_class) > 0 THEN
    PERFORM classes_move(c_class, c_delta);
  END IF;
  IF p_notify THEN
    FOREACH v_cls IN ARRAY v_ready LOOP
      PERFORM pg_notify(wakeup_channel(), v_cls);
    END LOOP;
  END IF;
  RETURN QUERY SELECT unnest(e_ord);
END
$$;

-- Acceptance of a batch (version 2's rules, checks and answers, item by item, in item order).
-- The locks are taken as before: the queue rows of the batch in (class, tenant) order, reading
-- their counters, then the class rows in class order when a cap needs them. Then one statement
-- reads every item's record and tombstone; the caps are counted item by item against those
-- counters plus the batch's own additions so far (as the per-item version's updates did); one
-- INSERT writes every accepted operation, and the counters move once per (class, tenant), in order
-- of first appearance, and once per class, last.
--
-- A single item, or an id named twice in one batch, goes item by item (version 2's function, kept
-- as submit_many_each): the second item must find the first. A concurrent submit of the same id that
-- commits between the read and the INSERT makes that item `existing` or `conflict`, as before;
-- the items after it were then counted with it, so they may be refused where the per-item version
-- would have accepted them: caps err on the safe side, never over.
ALTER FUNCTION submit_many(bigint, text[], text[], text[], text[], text[], text[], integer[], bigint[], bigint[],
                           boolean[], double precision[], integer[], integer[], integer[], boolean)
  RENAME TO submit_many_each;

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
  v_cls text;
  v_ready text[] := '{}';
  k record;
  gi integer;
  ci integer;
  -- The batch's (class, tenant) groups in lock order, their counters (locked) and additions.
  g_class text[] := '{}';
  g_tenant text[] := '{}';
  g_waiting integer[] := '{}';
  g_running integer[] := '{}';
  g_added integer[];
  -- Its classes in lock order, their waiting counts (locked when capped) and additions.
  l_class text[] := '{}';
  l_waiting integer[] := '{}';
  l_added integer[];
  -- Per item.
  a_group integer[];
  a_cls integer[];
  a_seq bigint[];
  a_digest text[];
  a_tomb text[];
  a_status text[];
  a_dm boolean[];
  a_reason text[];
  a_cw integer[];
  a_cr integer[];
  a_run_after bigint[];
  a_raced integer[];
  c_class text[] := '{}';
  c_delta integer[] := '{}';
BEGIN
  IF v_n = 0 THEN
    RETURN;
  END IF;
  -- One item (a quiet service: one submit per commit) costs less item by item: the set-based
  -- statements' plans pay for themselves only over a batch.
  IF v_n = 1 OR (SELECT count(DISTINCT (u.t, u.i)) FROM unnest(p_tenant, p_id) AS u(t, i)) < v_n THEN
    RETURN QUERY SELECT * FROM submit_many_each(p_now, p_tenant, p_id, p_kind, p_class, p_digest, p_input,
                                                p_max_attempts, p_deadline_ms, p_delay_ms, p_set_limits,
                                                p_weight, p_max_running, p_max_waiting, p_max_queued, p_notify);
    RETURN;
  END IF;

  FOR k IN
    SELECT DISTINCT u.c COLLATE "C" AS c, u.t COLLATE "C" AS t FROM unnest(p_class, p_tenant) AS u(c, t)
     ORDER BY 1, 2
  LOOP
    v_waiting := 0;
    v_running := 0;
    IF NOT v_defer THEN
      -- One index lookup per (class, tenant), in order.
      FOR pass IN 1 .. 3 LOOP
        SELECT q.waiting, q.running INTO v_waiting, v_running FROM queues q
         WHERE q.class = k.c AND q.tenant = k.t FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO queues (class, tenant) VALUES (k.c, k.t) ON CONFLICT DO NOTHING;
      END LOOP;
    END IF;
    g_class := g_class || k.c;
    g_tenant := g_tenant || k.t;
    g_waiting := g_waiting || coalesce(v_waiting, 0);
    g_running := g_running || coalesce(v_running, 0);
  END LOOP;
  FOR k IN SELECT DISTINCT u.c COLLATE "C" AS c FROM unnest(p_class) AS u(c) ORDER BY 1 LOOP
    v_waiting := 0;
    IF v_capped THEN
      -- Every class of the batch, not only the capped ones: classes_move takes them all at the
      -- end, and the class rows must be locked in one order.
      FOR pass IN 1 .. 3 LOOP
        SELECT x.waiting INTO v_waiting FROM classes x WHERE x.class = k.c FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO classes (class) VALUES (k.c) ON CONFLICT DO NOTHING;
      END LOOP;
    END IF;
    l_class := l_class || k.c;
    l_waiting := l_waiting || coalesce(v_waiting, 0);
  END LOOP;
  g_added := array_fill(0, ARRAY[cardinality(g_class)]);
  l_added := array_fill(0, ARRAY[cardinality(l_class)]);

  -- Every item's group, class, record and tombstone, in one statement (one snapshot: a purge
  -- committing meanwhile cannot make an id look neither accepted nor purged).
  SELECT array_agg(g.n ORDER BY u.n), array_agg(l.n ORDER BY u.n), array_agg(f.seq ORDER BY u.n),
         array_agg(f.digest ORDER BY u.n), array_agg(tb.digest ORDER BY u.n)
    INTO a_group, a_cls, a_seq, a_digest, a_tomb
    FROM unnest(p_class, p_tenant, p_id) WITH ORDINALITY AS u(c, t, i, n)
    JOIN unnest(g_class, g_tenant) WITH ORDINALITY AS g(c, t, n) ON g.c = u.c AND g.t = u.t
    JOIN unnest(l_class) WITH ORDINALITY AS l(c, n) ON l.c = u.c
    LEFT JOIN LATERAL (SELECT o.seq, o.digest FROM operations o WHERE o.tenant = u.t AND o.id = u.i OFFSET 0) f
           ON true
    LEFT JOIN LATERAL (SELECT x.digest FROM tombstones x WHERE x.tenant = u.t AND x.id = u.i OFFSET 0) tb
           ON true;

  a_status := array_fill(NULL::text, ARRAY[v_n]);
  a_dm := array_fill(NULL::boolean, ARRAY[v_n]);
  a_reason := array_fill(NULL::text, ARRAY[v_n]);
  a_cw := array_fill(NULL::integer, ARRAY[v_n]);
  a_cr := array_fill(NULL::integer, ARRAY[v_n]);
  a_run_after := array_fill(NULL::bigint, ARRAY[v_n]);
  FOR i IN 1 .. v_n LOOP
    gi := a_group[i];
    ci := a_cls[i];
    IF a_seq[i] IS NOT NULL THEN
      a_status[i] := CASE WHEN a_digest[i] = p_digest[i] THEN 'existing' ELSE 'conflict' END;
      CONTINUE;
    END IF;
    IF a_tomb[i] IS NOT NULL THEN
      a_status[i] := 'expired';
      a_dm[i] := a_tomb[i] = p_digest[i];
      CONTINUE;
    END IF;
    IF NOT v_defer AND (p_max_waiting[i] IS NOT NULL OR p_max_queued[i] IS NOT NULL) THEN
      v_waiting := g_waiting[gi] + g_added[gi];
      v_running := g_running[gi];
      IF p_max_waiting[i] IS NOT NULL AND v_waiting >= p_max_waiting[i] THEN
        a_status[i] := 'rejected';
        a_reason[i] := 'tenant-queue-full';
        a_cw[i] := v_waiting;
        a_cr[i] := v_running;
        CONTINUE;
      END IF;
      IF p_max_queued[i] IS NOT NULL AND l_waiting[ci] + l_added[ci] >= p_max_queued[i] THEN
        a_status[i] := 'rejected';
        a_reason[i] := 'class-queue-full';
        a_cw[i] := l_waiting[ci] + l_added[ci];
        a_cr[i] := v_running;
        CONTINUE;
      END IF;
    END IF;
    a_status[i] := 'created';
    a_run_after[i] := v_now + greatest(0, coalesce(p_delay_ms[i], 0));
    g_added[gi] := g_added[gi] + 1;
    l_added[ci] := l_added[ci] + 1;
  END LOOP;

  -- A concurrent submit of the same id that committed first (the INSERT waited for it) leaves its
  -- item out: that item answers from the record below.
  WITH ins AS (
    INSERT INTO operations (tenant, id, kind, class, digest, input, state, max_attempts, run_after, deadline_at,
                            created_at, updated_at)
    SELECT p_tenant[u.n], p_id[u.n], p_kind[u.n], p_class[u.n], p_digest[u.n], p_input[u.n], 'queued',
           p_max_attempts[u.n], a_run_after[u.n], v_now + p_deadline_ms[u.n], v_now, v_now
      FROM unnest(a_status) WITH ORDINALITY AS u(st, n)
     WHERE u.st = 'created'
     ORDER BY u.n
    ON CONFLICT (tenant, id) DO NOTHING
    RETURNING tenant, id)
  SELECT array_agg(u.n ORDER BY u.n) INTO a_raced
    FROM unnest(p_tenant, p_id, a_status) WITH ORDINALITY AS u(t, i, st, n)
   WHERE u.st = 'created' AND NOT EXISTS (SELECT 1 FROM ins WHERE ins.tenant = u.t AND ins.id = u.i);
  FOREACH gi IN ARRAY coalesce(a_raced, '{}') LOOP
    a_status[gi] := 'raced';
  END LOOP;

  -- The counters of what was written: per (class, tenant) in order of first appearance (the
  -- rows are locked already unless no item carries limits: then they are locked now, in order),
  -- then the classes.
  IF v_defer THEN
    PERFORM 1 FROM queues q
      JOIN (SELECT DISTINCT u.c COLLATE "C" AS c, u.t COLLATE "C" AS t
              FROM unnest(p_class, p_tenant, a_status) AS u(c, t, st) WHERE u.st = 'created') d
        ON q.class = d.c AND q.tenant = d.t
     ORDER BY q.class, q.tenant
       FOR UPDATE OF q;
  END IF;
  FOR k IN
    SELECT u.c, u.t, count(*)::integer AS n, min(u.ra) AS ra, (array_agg(u.n ORDER BY u.n DESC))[1] AS last
      FROM unnest(p_class, p_tenant, a_run_after, a_status) WITH ORDINALITY AS u(c, t, ra, st, n)
     WHERE u.st = 'created'
     GROUP BY u.c, u.t
     ORDER BY min(u.n)
  LOOP
    PERFORM queue_enter(k.c, k.t, k.n, k.ra, 0, p_set_limits[k.last], p_weight[k.last], p_max_running[k.last],
                        p_max_waiting[k.last]);
    c_class := c_class || k.c;
    c_delta := c_delta || k.n;
    IF k.ra <= v_now AND NOT k.c = ANY (v_ready) THEN
      v_ready := v_ready || k.c;
    END IF;
  END LOOP;
  IF cardinality(c_class) > 0 THEN
    PERFORM classes_move(c_class, c_delta);
  END IF;
  -- Delivered when (and only if) the transaction commits: idle workers of the class wake up.
  IF p_notify THEN
    FOREACH v_cls IN ARRAY v_ready LOOP
      PERFORM pg_notify(wakeup_channel(), v_cls);
    END LOOP;
  END IF;

  RETURN QUERY
    SELECT CASE WHEN u.st <> 'raced' THEN u.st WHEN (f.o).digest = p_digest[u.n] THEN 'existing' ELSE 'conflict' END,
           u.dm, u.rs, u.cw, u.cr, f.o
      FROM unnest(p_tenant, p_id, a_status, a_dm, a_reason, a_cw, a_cr) WITH ORDINALITY AS u(t, i, st, dm, rs, cw, cr, n)
      LEFT JOIN LATERAL (SELECT o FROM operations o
                          WHERE u.st IN ('created', 'existing', 'conflict', 'raced') AND o.tenant = u.t
                            AND o.id = u.i OFFSET 0) f(o) ON true
     ORDER BY u.n;
END
$$;

-- One submit (a quiet service, a caller's transaction): version 2's rules for a batch of one, in
-- the fewest statements, with scalar arguments and no nested function calls. The record and the
-- tombstone are read first: a duplicate is answered without taking any lock. Otherwise the
-- tenant's queue row is locked and read (created if missing), then the class row when the class
-- is capped (the lock order of every batch), the caps checked, the operation inserted, and the
-- counters moved (queue_enter's update, inline). A concurrent submit of the same id that commits
-- first makes the INSERT do nothing: the item answers from that record and moves no counter.
CREATE FUNCTION submit_one(p_now bigint, p_tenant text, p_id text, p_kind text, p_class text, p_digest text,
                           p_input text, p_max_attempts integer, p_deadline_ms bigint, p_delay_ms bigint,
                           p_set_limits boolean, p_weight double precision, p_max_running integer,
                           p_max_waiting integer, p_max_queued integer, p_notify boolean)
RETURNS TABLE (status text, digest_matches boolean, reason text, counted_waiting integer,
               counted_running integer, op operations)
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
DECLARE
  v_now bigint := now_ms(p_now);
  v_run_after bigint := v_now + greatest(0, coalesce(p_delay_ms, 0));
  v_waiting integer;
  v_running integer;
  v_class_waiting integer;
  found_row record;
  r operations;
BEGIN
  SELECT o AS op, t.digest AS tomb INTO found_row
    FROM (SELECT 1) AS one
    LEFT JOIN operations o ON o.tenant = p_tenant AND o.id = p_id
    LEFT JOIN tombstones t ON t.tenant = p_tenant AND t.id = p_id;
  IF (found_row.op).seq IS NOT NULL THEN
    op := found_row.op;
    status := CASE WHEN op.digest = p_digest THEN 'existing' ELSE 'conflict' END;
    RETURN NEXT;
    RETURN;
  END IF;
  IF found_row.tomb IS NOT NULL THEN
    status := 'expired';
    digest_matches := found_row.tomb = p_digest;
    RETURN NEXT;
    RETURN;
  END IF;

  FOR pass IN 1 .. 3 LOOP
    SELECT q.waiting, q.running INTO v_waiting, v_running FROM queues q
     WHERE q.class = p_class AND q.tenant = p_tenant FOR UPDATE;
    EXIT WHEN FOUND;
    INSERT INTO queues (class, tenant) VALUES (p_class, p_tenant) ON CONFLICT DO NOTHING;
  END LOOP;
  IF p_max_queued IS NOT NULL THEN
    FOR pass IN 1 .. 3 LOOP
      SELECT x.waiting INTO v_class_waiting FROM classes x WHERE x.class = p_class FOR UPDATE;
      EXIT WHEN FOUND;
      INSERT INTO classes (class) VALUES (p_class) ON CONFLICT DO NOTHING;
    END LOOP;
  END IF;
  IF p_max_waiting IS NOT NULL AND v_waiting >= p_max_waiting THEN
    status := 'rejected';
    reason := 'tenant-queue-full';
    counted_waiting := v_waiting;
    counted_running := v_running;
    RETURN NEXT;
    RETURN;
  END IF;
  IF p_max_queued IS NOT NULL AND v_class_waiting >= p_max_queued THEN
    status := 'rejected';
    reason := 'class-queue-full';
    counted_waiting := v_class_waiting;
    counted_running := v_running;
    RETURN NEXT;
    RETURN;
  END IF;

  INSERT INTO operations (tenant, id, kind, class, digest, input, state, max_attempts, run_after,
                          deadline_at, created_at, updated_at)
  VALUES (p_tenant, p_id, p_kind, p_class, p_digest, p_input, 'queued',
          p_max_attempts, v_run_after, v_now + p_deadline_ms, v_now, v_now)
  ON CONFLICT (tenant, id) DO NOTHING
  RETURNING * INTO r;
  IF NOT FOUND THEN
    SELECT * INTO r FROM operations o WHERE o.tenant = p_tenant AND o.id = p_id;
    status := CASE WHEN r.digest = p_digest THEN 'existing' ELSE 'conflict' END;
    op := r;
    RETURN NEXT;
    RETURN;
  END IF;

  UPDATE queues q SET
      waiting = q.waiting + 1,
      vtime = CASE WHEN q.ready_at IS NULL THEN greatest(q.vtime, coalesce(
                (SELECT e.vtime FROM queues e WHERE e.class = p_class AND e.ready_at IS NOT NULL
                   AND (e.max_running IS NULL OR e.running < e.max_running)
                 ORDER BY e.vtime LIMIT 1), q.vtime))
              ELSE q.vtime END,
      ready_at = least(coalesce(q.ready_at, v_run_after), v_run_after),
      weight = CASE WHEN p_set_limits THEN p_weight ELSE q.weight END,
      max_running = CASE WHEN p_set_limits THEN p_max_running ELSE q.max_running END,
      max_waiting = CASE WHEN p_set_limits THEN p_max_waiting ELSE q.max_waiting END
   WHERE q.class = p_class AND q.tenant = p_tenant;
  UPDATE classes x SET waiting = x.waiting + 1 WHERE x.class = p_class;
  IF NOT FOUND THEN
    INSERT INTO classes AS x (class, waiting) VALUES (p_class, 1)
    ON CONFLICT (class) DO UPDATE SET waiting = x.waiting + excluded.waiting;
  END IF;
  -- Delivered when (and only if) the transaction commits: idle workers of the class wake up.
  IF p_notify AND v_run_after <= v_now THEN
    PERFORM pg_notify('sluice_' || current_schema(), p_class);
  END IF;
  status := 'created';
  op := r;
  RETURN NEXT;
END
$$;
