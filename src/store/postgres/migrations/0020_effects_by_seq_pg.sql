-- Version 20. An operation's effects are found by the operation's `seq`, as its attempts are
-- since version 17 (SQLite's effects since version 19). The effects' key was (tenant, op_id,
-- name): each begin put an entry into that key's index wherever the client's id sorts, and an
-- idempotency key is often random. Keyed by (op_seq, name), a round's entries land on the key's
-- last leaves. The `tenant` and `op_id` columns stay (the rows the journal's functions return
-- carry them), unindexed. The functions that find effects are recreated with only their look-ups
-- changed (the migrations before are history and are not edited): effect_begin,
-- effect_begin_many, effect_mark, effect_mark_many and effect_record_send (version 15's),
-- finish_many (version 17's). effect_mark_many now locks the effect rows in (seq, name) order,
-- the only statement that locks more than one.

ALTER TABLE effects ADD COLUMN op_seq bigint;
UPDATE effects e SET op_seq = o.seq FROM operations o WHERE o.tenant = e.tenant AND o.id = e.op_id;
DELETE FROM effects WHERE op_seq IS NULL;
ALTER TABLE effects ALTER COLUMN op_seq SET NOT NULL;
ALTER TABLE effects DROP CONSTRAINT effects_pkey;
ALTER TABLE effects ADD PRIMARY KEY (op_seq, name);

CREATE OR REPLACE FUNCTION effect_begin(p_now bigint, p_tenant text, p_id text, p_epoch bigint, p_name text, p_key text, p_provider text, p_cost bigint, p_b_key text[], p_b_limit bigint[], p_b_window bigint[], p_b_cost bigint[], p_b_spend boolean[], p_max_calls integer)
 RETURNS TABLE(status text, clock bigint, refused_by text, retry_after bigint, calls bigint, eff effects)
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
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
  SELECT * INTO e FROM effects x WHERE x.op_seq = o.seq AND x.name = p_name;
  IF FOUND THEN
    -- Returned as it is: any further request goes through effect_record_send.
    status := 'existing';
  ELSE
    IF p_max_calls IS NOT NULL THEN
      SELECT coalesce(sum(x.sends), 0) INTO calls FROM effects x WHERE x.op_seq = o.seq;
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
    INSERT INTO effects (op_seq, tenant, op_id, name, key, state, provider, cost, first_sent_at, last_sent_at, sends,
                         epoch, reservations)
    VALUES (o.seq, p_tenant, p_id, p_name, p_key, 'pending', p_provider, p_cost, clock, clock, 1, p_epoch,
            v_reservations)
    RETURNING * INTO e;
    status := 'created';
  END IF;
  UPDATE operations SET effect_started_at = coalesce(effect_started_at, clock), updated_at = clock
   WHERE seq = o.seq;
  eff := e;
  RETURN NEXT;
END
$$
;

CREATE OR REPLACE FUNCTION effect_begin_many(p_now bigint, p_items jsonb)
 RETURNS TABLE(ord integer, status text, clock bigint, refused_by text, retry_after bigint, calls bigint, eff effects)
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
AS $$
DECLARE
  v_clock bigint;
  v_n integer;
  -- Per item, in item order.
  a_tenant text[];
  a_id text[];
  a_epoch bigint[];
  a_name text[];
  a_key text[];
  a_provider text[];
  a_cost bigint[];
  a_max integer[];
  a_status text[];
  a_calls bigint[];
  -- Per item, what the locked operation row says (NULL when missing).
  o_seq bigint[];
  o_epoch bigint[];
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
                    AS (tenant text, id text, epoch bigint, name text, key text, provider text, cost bigint,
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
  -- The rows by key, locked in lock order, in one statement (each lock returns the row's latest
  -- version, which is what the checks below read). An operation named by no row stays NULL.
  o_seq := array_fill(NULL::bigint, ARRAY[v_n]);
  o_epoch := array_fill(NULL::bigint, ARRAY[v_n]);
  o_state := array_fill(NULL::text, ARRAY[v_n]);
  o_cancel := array_fill(NULL::text, ARRAY[v_n]);
  FOR k IN
    SELECT u.n::integer AS n, o.seq, o.epoch, o.state, o.cancel
      FROM unnest(a_tenant, a_id) WITH ORDINALITY AS u(tenant, id, n)
      JOIN operations o ON o.tenant = u.tenant AND o.id = u.id
     ORDER BY o.class, o.tenant, o.seq
       FOR NO KEY UPDATE OF o
  LOOP
    o_seq[k.n] := k.seq;
    o_epoch[k.n] := k.epoch;
    o_state[k.n] := k.state;
    o_cancel[k.n] := k.cancel;
  END LOOP;

  -- Existing journal rows and requests made so far, per item (under the operation's lock).
  SELECT array_agg(s.found ORDER BY s.n), array_agg(s.sends ORDER BY s.n) INTO a_status, a_calls
    FROM (SELECT u.n,
                 CASE WHEN EXISTS (SELECT 1 FROM effects e WHERE e.op_seq = u.seq AND e.name = u.name)
                      THEN 'existing' END AS found,
                 CASE WHEN u.mx IS NOT NULL
                      THEN (SELECT coalesce(sum(e.sends), 0) FROM effects e WHERE e.op_seq = u.seq)
                 END AS sends
            FROM unnest(o_seq, a_name, a_max) WITH ORDINALITY AS u(seq, name, mx, n)) s;

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
    INSERT INTO effects (op_seq, tenant, op_id, name, key, state, provider, cost, first_sent_at, last_sent_at, sends,
                         epoch)
    SELECT o_seq[j], a_tenant[j], a_id[j], a_name[j], a_key[j], 'pending', a_provider[j], a_cost[j], v_clock, v_clock,
           1, a_epoch[j]
      FROM unnest(c_ord) AS j;
  END IF;
  UPDATE operations o SET effect_started_at = coalesce(o.effect_started_at, v_clock), updated_at = v_clock
   WHERE o.seq = ANY (ARRAY(SELECT u.seq FROM unnest(o_seq, a_status) AS u(seq, st)
                             WHERE u.st IN ('created', 'existing')));

  RETURN QUERY
    SELECT u.n::integer, u.st, v_clock, NULL::text, NULL::bigint,
           CASE WHEN u.st = 'call-limit' THEN u.sends END, e
      FROM unnest(o_seq, a_name, a_status, a_calls) WITH ORDINALITY AS u(seq, name, st, sends, n)
      LEFT JOIN LATERAL (SELECT x FROM effects x
                          WHERE u.st = 'existing' AND x.op_seq = u.seq AND x.name = u.name OFFSET 0) f(e) ON true
     ORDER BY u.n;
END
$$
;

CREATE OR REPLACE FUNCTION effect_mark(p_now bigint, p_tenant text, p_id text, p_epoch bigint, p_name text, p_state text, p_result text, p_reference text, p_error text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
AS $$
DECLARE
  v_seq bigint;
  v_state text;
  v_reservations jsonb;
BEGIN
  SELECT o.seq INTO v_seq FROM operations o
   WHERE o.seq = (SELECT x.seq FROM operations x WHERE x.tenant = p_tenant AND x.id = p_id)
     AND o.epoch = p_epoch AND o.state = 'running'
     FOR SHARE;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  SELECT x.state, x.reservations INTO v_state, v_reservations FROM effects x
   WHERE x.op_seq = v_seq AND x.name = p_name
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
     WHERE x.op_seq = v_seq AND x.name = p_name;
  ELSE
    UPDATE effects x SET state = p_state, result = p_result, reference = p_reference, error = p_error,
           committed_at = CASE WHEN p_state = 'committed' THEN now_ms(p_now) END, epoch = p_epoch,
           reservations = NULL
     WHERE x.op_seq = v_seq AND x.name = p_name;
  END IF;
  RETURN true;
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
    FROM unnest(a_seq, a_name, a_epoch, a_state, a_result, a_reference, a_error, a_ok)
         AS u(seq, name, epoch, state, result, reference, error, ok)
   WHERE u.ok AND x.op_seq = u.seq AND x.name = u.name;

  RETURN QUERY SELECT u.n::integer, u.ok FROM unnest(a_ok) WITH ORDINALITY AS u(ok, n) ORDER BY u.n;
END
$$
;

CREATE OR REPLACE FUNCTION effect_record_send(p_now bigint, p_tenant text, p_id text, p_epoch bigint, p_name text, p_b_key text[], p_b_limit bigint[], p_b_window bigint[], p_b_cost bigint[], p_b_spend boolean[], p_max_calls integer)
 RETURNS TABLE(status text, clock bigint, refused_by text, retry_after bigint, calls bigint, was text, eff effects)
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
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
  SELECT * INTO e FROM effects x WHERE x.op_seq = o.seq AND x.name = p_name;
  IF NOT FOUND OR e.state NOT IN ('pending', 'absent') THEN
    status := 'invalid';
    was := e.state;
    RETURN NEXT;
    RETURN;
  END IF;
  IF p_max_calls IS NOT NULL THEN
    SELECT coalesce(sum(x.sends), 0) INTO calls FROM effects x WHERE x.op_seq = o.seq;
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
   WHERE x.op_seq = o.seq AND x.name = p_name
  RETURNING * INTO e;
  status := 'sent';
  eff := e;
  RETURN NEXT;
END
$$
;

CREATE OR REPLACE FUNCTION finish_many(p_now bigint, p_tenant text[], p_id text[], p_epoch bigint[], p_outcome text[], p_result text[], p_error text[], p_delay_ms bigint[], p_notify boolean)
 RETURNS SETOF integer
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
AS $$
DECLARE
  v_now bigint := now_ms(p_now);
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
  -- Their attempt rows (the operation's seq is e_seq's).
  t_epoch bigint[] := '{}';
  t_attempt integer[] := '{}';
  t_owner text[] := '{}';
  t_started bigint[] := '{}';
  t_outcome text[] := '{}';
  t_delay bigint[] := '{}';
  c_class text[] := '{}';
  c_delta integer[] := '{}';
BEGIN
  -- Found by key, locked in (class, tenant, seq) order and read, in one statement: FOR UPDATE
  -- hands back each row as it is once locked, and drops one a rescue moved meanwhile (another
  -- epoch, or no longer running). An operation that never began an effect has no journal rows.
  FOR o IN
    SELECT u.n::integer AS ord, x.seq, x.class, x.tenant, x.id, x.epoch, x.attempt, x.run_after, x.started_at,
           x.lease_owner, x.cancel, x.error,
           x.effect_started_at IS NOT NULL
             AND EXISTS (SELECT 1 FROM effects e WHERE e.op_seq = x.seq AND e.state = 'pending')
             AS pending,
           x.effect_started_at IS NOT NULL
             AND EXISTS (SELECT 1 FROM effects e WHERE e.op_seq = x.seq AND e.state IN ('pending', 'committed'))
             AS no_return
      FROM unnest(p_tenant, p_id, p_epoch) WITH ORDINALITY AS u(tenant, id, epoch, n)
      JOIN operations x ON x.tenant = u.tenant AND x.id = u.id
     WHERE x.epoch = u.epoch AND x.state = 'running'
     ORDER BY x.class, x.tenant, x.seq, u.n
       FOR UPDATE OF x
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

  INSERT INTO attempts (op_seq, epoch, attempt, owner, started_at, ended_at, outcome, error, retry_delay_ms)
  SELECT u.seq, u.epoch, u.attempt, u.owner, u.started, v_now, u.outcome, u.err, u.delay
    FROM unnest(e_seq, t_epoch, t_attempt, t_owner, t_started, t_outcome, e_error, t_delay)
         AS u(seq, epoch, attempt, owner, started, outcome, err, delay);

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
$$
;
