-- Version 18. A batch's submit no longer compares every item with every row it wrote. To find
-- the items whose id a concurrent submit had taken meanwhile (the rows `ON CONFLICT DO NOTHING`
-- leaves out), the function looked each created item up among the rows its INSERT returned;
-- planned generically (migration 6), that anti-join was a nested loop: 124,750 comparisons for a
-- batch of 500, more time than the INSERT itself. Now it counts the rows that went in and looks
-- for the missing ones only when fewer went in than it sent, which needs a race on the same id. The
-- body is otherwise version 4's, with version 6's settings stated again.

CREATE OR REPLACE FUNCTION submit_many(p_now bigint, p_tenant text[], p_id text[], p_kind text[], p_class text[], p_digest text[], p_input text[], p_max_attempts integer[], p_deadline_ms bigint[], p_delay_ms bigint[], p_set_limits boolean[], p_weight double precision[], p_max_running integer[], p_max_waiting integer[], p_max_queued integer[], p_notify boolean)
 RETURNS TABLE(status text, digest_matches boolean, reason text, counted_waiting integer, counted_running integer, op operations)
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
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
  v_created integer;
  i_tenant text[];
  i_id text[];
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
  -- item out: that item answers from the record below. Which items those are is worked out only
  -- when fewer rows went in than were sent (a race is rare, and the search compares every item
  -- with every row written).
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
  SELECT array_agg(ins.tenant), array_agg(ins.id) INTO i_tenant, i_id FROM ins;
  SELECT count(*) INTO v_created FROM unnest(a_status) AS u(st) WHERE u.st = 'created';
  IF coalesce(cardinality(i_tenant), 0) < v_created THEN
    SELECT array_agg(u.n ORDER BY u.n) INTO a_raced
      FROM unnest(p_tenant, p_id, a_status) WITH ORDINALITY AS u(t, i, st, n)
     WHERE u.st = 'created'
       AND NOT EXISTS (SELECT 1 FROM unnest(i_tenant, i_id) AS x(t, i) WHERE x.t = u.t AND x.i = u.i);
  END IF;
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
$$
;
