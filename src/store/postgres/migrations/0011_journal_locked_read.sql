-- Version 11: the journal's batch functions find and lock their operations with one statement
-- each instead of two, as version 10's finish does. Nothing they decide or write changes.
--
-- effect_begin_many looked each item's operation up by key, then locked the rows by `seq` in
-- (class, tenant, seq) order (FOR NO KEY UPDATE); effect_mark_many did the same with its share
-- locks, the fence. A join of the items with `operations` on the key, sorted in lock order under
-- the lock clause, does both: the rows are locked as the sort returns them, each read as it is once
-- locked. Items naming one operation twice still go item by item (their `_each` versions).
--
-- effect_begin_many also no longer reads back the `pending` rows it has just written: a created
-- row holds nothing but what the caller sent and the clock, which it returns, and the store builds
-- the row from those (store/created-row.ts). An existing row, which the caller did not send, still
-- comes back whole.

CREATE OR REPLACE FUNCTION effect_begin_many(p_now bigint, p_items jsonb)
RETURNS TABLE (ord integer, status text, clock bigint, refused_by text, retry_after bigint, calls bigint,
               eff effects)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off
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
  -- The rows by key, locked in lock order, in one statement (each lock returns the row's latest
  -- version, which is what the checks below read). An operation named by no row stays NULL.
  o_seq := array_fill(NULL::bigint, ARRAY[v_n]);
  o_epoch := array_fill(NULL::integer, ARRAY[v_n]);
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
                          WHERE u.st = 'existing' AND x.tenant = u.tenant AND x.op_id = u.id
                            AND x.name = u.name OFFSET 0) f(e) ON true
     ORDER BY u.n;
END
$$;

CREATE OR REPLACE FUNCTION effect_mark_many(p_now bigint, p_items jsonb)
RETURNS TABLE (ord integer, ok boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off
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
  -- The fence: each item's operation, found by key and share-locked in lock order, in one
  -- statement; held when it runs under the item's epoch.
  a_held := array_fill(false, ARRAY[v_n]);
  FOR k IN
    SELECT u.n::integer AS n, o.epoch
      FROM unnest(a_tenant, a_id) WITH ORDINALITY AS u(tenant, id, n)
      JOIN operations o ON o.tenant = u.tenant AND o.id = u.id
     WHERE o.state = 'running'
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
