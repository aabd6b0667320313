-- Version 32. A refused submit leaves the queue rows as it found them.
--
-- The submit functions count the tenant into its queue row first, so that an accepted submit (the
-- common case) costs one statement there, and check the class's bound after, under the lock order
-- every writer keeps (the tenant's row, then the class's). When the class was full, the single
-- submit took back the count alone. The same statement had also marked the tenant ready from the
-- submit's run_after (a tenant with nothing waiting was left "ready" with nothing in it, which
-- every claim of the class then looked at, and its virtual time was moved forward; a tenant whose
-- work was all delayed was marked due now), and for a tenant never seen it had made a row that no
-- purge removes: the purge forgets a tenant with its last operation, and this one has none. The
-- batch functions made such rows too, for every tenant new to them whose items were all refused,
-- and so did a tenant's own cap of 0.
--
-- Now a refusal by the class puts the tenant's readiness back from its waiting operations (as a
-- claim computes it), so that its next entry sets its virtual time afresh, and a row a submit
-- made for a tenant that it then accepted nothing for is deleted in the same transaction. An
-- accepted single submit runs the statements it ran before; a batch that made a tenant's row runs
-- one more, to forget those it counted nothing into.
--
-- Once, what earlier versions left: rows of tenants with no operation and nothing counted (as
-- version 28 did), and rows marked ready with nothing waiting. A row a transaction holds is
-- waited for; one that transaction counts work into is read again as it committed, and kept.
-- Older builds: compatible.

DELETE FROM queues q
 WHERE q.waiting = 0 AND q.running = 0 AND q.ready_at IS NULL
   AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.tenant = q.tenant);
UPDATE queues q SET ready_at = NULL WHERE q.waiting = 0 AND q.ready_at IS NOT NULL;

-- Takes back a single submit's count in its tenant's row, when the class refused it or its id was
-- accepted meanwhile by another submit; returns the tenant's running count. A row this submit
-- made (`p_made`) goes: it was not there before. Otherwise the waiting count goes back and the
-- readiness is read again from the tenant's waiting operations (as a claim reads it): NULL with
-- none. The count had also moved the virtual time of a tenant with nothing waiting: at most to the
-- least of the class's ready tenants', where its next entry moves it anyway (unless one of them
-- held back by its running cap has a lesser one by then), so it stays.
CREATE FUNCTION queue_take_back(p_class text, p_tenant text, p_made boolean) RETURNS integer
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off
AS $$
DECLARE
  v_running integer;
BEGIN
  IF p_made THEN
    DELETE FROM queues q WHERE q.class = p_class AND q.tenant = p_tenant;
    RETURN 0;
  END IF;
  UPDATE queues q SET waiting = q.waiting - 1,
         ready_at = (SELECT min(o.run_after) FROM operations o
                      WHERE o.class = p_class AND o.tenant = p_tenant AND o.state = 'queued')
   WHERE q.class = p_class AND q.tenant = p_tenant
  RETURNING q.running INTO v_running;
  RETURN v_running;
END
$$;

-- Deletes the queue rows a batch submit made (it holds them) that it then counted nothing into.
CREATE FUNCTION queues_forget_made(p_class text[], p_tenant text[]) RETURNS void
LANGUAGE sql
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off
AS $$
  DELETE FROM queues q
   USING unnest(p_class, p_tenant) AS m(c, t)
   WHERE q.class = m.c AND q.tenant = m.t AND q.waiting = 0 AND q.running = 0;
$$;

-- Version 31's single submit. A refusal by the class, or an id another submit accepted meanwhile,
-- takes the tenant's count back whole (queue_take_back); a row it made for a tenant refused by its
-- own cap goes.
CREATE OR REPLACE FUNCTION submit_one(p_now bigint, p_tenant text, p_id text, p_kind text, p_class text, p_digest text,
                           p_input text, p_max_attempts integer, p_deadline_ms bigint, p_delay_ms bigint,
                           p_set_limits boolean, p_weight double precision, p_max_running integer,
                           p_max_waiting integer, p_max_queued integer, p_notify boolean,
                           p_in_tx boolean DEFAULT false)
RETURNS TABLE (status text, digest_matches boolean, reason text, counted_waiting integer,
               counted_running integer, op operations)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off
AS $$
DECLARE
  v_now bigint := now_ms(p_now);
  v_run_after bigint := v_now + greatest(0, coalesce(p_delay_ms, 0));
  v_waiting integer;
  v_running integer;
  v_counted boolean;
  v_full boolean := false;
  v_made boolean := false;
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

  -- The tenant's row: counted in if its cap has room (queue_enter's update, inline).
  FOR pass IN 1 .. 3 LOOP
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
     WHERE q.class = p_class AND q.tenant = p_tenant
       AND (p_max_waiting IS NULL OR q.waiting < p_max_waiting)
    RETURNING true INTO v_counted;
    EXIT WHEN v_counted;
    SELECT q.waiting, q.running INTO v_waiting, v_running FROM queues q
     WHERE q.class = p_class AND q.tenant = p_tenant FOR UPDATE;
    IF FOUND AND v_waiting >= p_max_waiting THEN
      -- Under the row's lock, still no room: the cap refuses. (Room made since the UPDATE looked,
      -- by a claim that committed meanwhile, sends it round again.) Unless the room went to this
      -- very id, submitted at the same moment and committed while this one waited for the lock:
      -- a duplicate is answered from its record, never refused.
      IF v_made THEN
        DELETE FROM queues q WHERE q.class = p_class AND q.tenant = p_tenant;
      END IF;
      SELECT * INTO r FROM operations o WHERE o.tenant = p_tenant AND o.id = p_id;
      IF FOUND THEN
        status := CASE WHEN r.digest = p_digest THEN 'existing' ELSE 'conflict' END;
        op := r;
        RETURN NEXT;
        RETURN;
      END IF;
      status := 'rejected';
      reason := 'tenant-queue-full';
      counted_waiting := v_waiting;
      counted_running := v_running;
      RETURN NEXT;
      RETURN;
    END IF;
    IF NOT FOUND THEN
      INSERT INTO queues (class, tenant) VALUES (p_class, p_tenant) ON CONFLICT DO NOTHING;
      v_made := v_made OR FOUND;
    END IF;
  END LOOP;
  IF NOT coalesce(v_counted, false) THEN
    RAISE EXCEPTION 'queue row of (%, %) could not be counted', p_class, p_tenant;
  END IF;

  -- The class's bound. Outside the caller's transaction: counted into the class row under its lock,
  -- the bound read with the deltas committed so far. Inside it: read, not locked, and counted at
  -- the end as a delta (the header above).
  IF p_in_tx THEN
    IF p_max_queued IS NOT NULL THEN
      SELECT coalesce(max(x.waiting), 0)
             + (SELECT coalesce(sum(d.waiting), 0) FROM class_deltas d WHERE d.class = p_class)
        INTO v_waiting FROM classes x WHERE x.class = p_class;
      v_full := v_waiting >= p_max_queued;
    END IF;
  ELSE
    v_counted := NULL;
    FOR pass IN 1 .. 3 LOOP
      UPDATE classes x SET waiting = x.waiting + 1
       WHERE x.class = p_class
         AND (p_max_queued IS NULL
              OR x.waiting + (SELECT coalesce(sum(d.waiting), 0) FROM class_deltas d WHERE d.class = p_class)
                 < p_max_queued)
      RETURNING true INTO v_counted;
      EXIT WHEN v_counted;
      SELECT x.waiting INTO v_waiting FROM classes x WHERE x.class = p_class FOR UPDATE;
      IF FOUND THEN
        -- Under the row's lock, in a statement of its own: no fold can move a delta into the row
        -- meanwhile, so none is counted twice (the UPDATE's subquery kept its earlier snapshot).
        v_waiting := v_waiting
                     + (SELECT coalesce(sum(d.waiting), 0) FROM class_deltas d WHERE d.class = p_class);
        v_full := p_max_queued IS NOT NULL AND v_waiting >= p_max_queued;
        EXIT WHEN v_full;
      ELSE
        INSERT INTO classes (class) VALUES (p_class) ON CONFLICT DO NOTHING;
      END IF;
    END LOOP;
    IF NOT v_full AND NOT coalesce(v_counted, false) THEN
      RAISE EXCEPTION 'class row of % could not be counted', p_class;
    END IF;
  END IF;
  IF v_full THEN
    v_running := queue_take_back(p_class, p_tenant, v_made);
    -- As above: the id itself may have been accepted meanwhile.
    SELECT * INTO r FROM operations o WHERE o.tenant = p_tenant AND o.id = p_id;
    IF FOUND THEN
      status := CASE WHEN r.digest = p_digest THEN 'existing' ELSE 'conflict' END;
      op := r;
      RETURN NEXT;
      RETURN;
    END IF;
    status := 'rejected';
    reason := 'class-queue-full';
    counted_waiting := v_waiting;
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
    PERFORM queue_take_back(p_class, p_tenant, v_made);
    IF NOT p_in_tx THEN
      UPDATE classes x SET waiting = x.waiting - 1 WHERE x.class = p_class;
    END IF;
    SELECT * INTO r FROM operations o WHERE o.tenant = p_tenant AND o.id = p_id;
    status := CASE WHEN r.digest = p_digest THEN 'existing' ELSE 'conflict' END;
    op := r;
    RETURN NEXT;
    RETURN;
  END IF;
  IF p_in_tx THEN
    PERFORM class_deltas_add(ARRAY[p_class], ARRAY[1]);
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

-- Version 31's batch submit. The queue rows it made for tenants it then accepted nothing for go at
-- the end (refused, or answered from a record or a tombstone).
CREATE OR REPLACE FUNCTION submit_many(p_now bigint, p_tenant text[], p_id text[], p_kind text[], p_class text[], p_digest text[], p_input text[], p_max_attempts integer[], p_deadline_ms bigint[], p_delay_ms bigint[], p_set_limits boolean[], p_weight double precision[], p_max_running integer[], p_max_waiting integer[], p_max_queued integer[], p_notify boolean,
                            p_in_tx boolean DEFAULT false)
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
  g_made_class text[] := '{}';
  g_made_tenant text[] := '{}';
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
                                                p_weight, p_max_running, p_max_waiting, p_max_queued, p_notify,
                                                p_in_tx);
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
        IF FOUND THEN
          g_made_class := g_made_class || k.c;
          g_made_tenant := g_made_tenant || k.t;
        END IF;
      END LOOP;
    END IF;
    g_class := g_class || k.c;
    g_tenant := g_tenant || k.t;
    g_waiting := g_waiting || coalesce(v_waiting, 0);
    g_running := g_running || coalesce(v_running, 0);
  END LOOP;
  FOR k IN SELECT DISTINCT u.c COLLATE "C" AS c FROM unnest(p_class) AS u(c) ORDER BY 1 LOOP
    v_waiting := 0;
    IF v_capped AND p_in_tx THEN
      -- Inside the caller's transaction: read, not locked (the header above).
      SELECT x.waiting INTO v_waiting FROM classes x WHERE x.class = k.c;
    ELSIF v_capped THEN
      -- Every class of the batch, not only the capped ones: classes_move takes them all at the
      -- end, and the class rows must be locked in one order.
      FOR pass IN 1 .. 3 LOOP
        SELECT x.waiting INTO v_waiting FROM classes x WHERE x.class = k.c FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO classes (class) VALUES (k.c) ON CONFLICT DO NOTHING;
      END LOOP;
    END IF;
    IF v_capped THEN
      -- A statement of its own, after the lock: every delta committed before it, none twice.
      v_waiting := coalesce(v_waiting, 0) + (SELECT coalesce(sum(d.waiting), 0) FROM class_deltas d WHERE d.class = k.c);
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
  IF cardinality(c_class) > 0 AND p_in_tx THEN
    PERFORM class_deltas_add(c_class, c_delta);
  ELSIF cardinality(c_class) > 0 THEN
    PERFORM classes_move(c_class, c_delta);
  END IF;
  IF cardinality(g_made_class) > 0 THEN
    PERFORM queues_forget_made(g_made_class, g_made_tenant);
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

-- Version 31's submit item by item (for one item or an id named twice), likewise.
CREATE OR REPLACE FUNCTION submit_many_each(p_now bigint, p_tenant text[], p_id text[], p_kind text[], p_class text[],
                            p_digest text[], p_input text[], p_max_attempts integer[],
                            p_deadline_ms bigint[], p_delay_ms bigint[], p_set_limits boolean[],
                            p_weight double precision[], p_max_running integer[],
                            p_max_waiting integer[], p_max_queued integer[], p_notify boolean,
                                 p_in_tx boolean DEFAULT false)
RETURNS TABLE (status text, digest_matches boolean, reason text, counted_waiting integer,
               counted_running integer, op operations)
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off
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
  -- The queue rows it made.
  m_class text[] := '{}';
  m_tenant text[] := '{}';
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
        IF FOUND THEN
          m_class := m_class || k.c;
          m_tenant := m_tenant || k.t;
        END IF;
      END LOOP;
    END LOOP;
  END IF;
  IF v_capped AND NOT p_in_tx THEN
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
        v_class_waiting := coalesce(v_class_waiting, 0) + (SELECT coalesce(sum(d.waiting), 0) FROM class_deltas d WHERE d.class = p_class[i])
                           + coalesce(c_delta[v_pos], 0);
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
  IF array_length(c_class, 1) > 0 AND p_in_tx THEN
    PERFORM class_deltas_add(c_class, c_delta);
  ELSIF array_length(c_class, 1) > 0 THEN
    PERFORM classes_move(c_class, c_delta);
  END IF;
  IF cardinality(m_class) > 0 THEN
    PERFORM queues_forget_made(m_class, m_tenant);
  END IF;
  -- Delivered when (and only if) the transaction commits: idle workers of the class wake up.
  IF p_notify THEN
    FOREACH v_cls IN ARRAY v_ready LOOP
      PERFORM pg_notify(wakeup_channel(), v_cls);
    END LOOP;
  END IF;
END
$$;
