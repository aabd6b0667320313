-- Version 22: a submit refused at a full cap first looks again for its own id.
--
-- submit_one reads the record and the tombstone without a lock, then counts itself in under the
-- tenant's queue row and the class row. Two submits of one id at the moment a cap had one place
-- left both found no record; the first took the place and committed while the second waited for
-- the row's lock, and the second, finding the cap full, was refused with `tenant-queue-full` (or
-- `class-queue-full`): a 429 for an id that was accepted, where DESIGN.md answers a duplicate
-- from its record and never counts it against capacity (and another input under the same id got
-- a 429 instead of the 422 of a conflict). The batch function locks first and looks up after, and
-- never did this. Now a refusal reads the record again, under the lock that made it wait, in a
-- statement of its own (a new snapshot under READ COMMITTED), and answers from it when it is
-- there. Only refusals pay for the read; an accepted submit runs as in version 9, whose function
-- this is with those two reads added.
CREATE OR REPLACE FUNCTION submit_one(p_now bigint, p_tenant text, p_id text, p_kind text, p_class text, p_digest text,
                                      p_input text, p_max_attempts integer, p_deadline_ms bigint, p_delay_ms bigint,
                                      p_set_limits boolean, p_weight double precision, p_max_running integer,
                                      p_max_waiting integer, p_max_queued integer, p_notify boolean)
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
    END IF;
  END LOOP;
  IF NOT coalesce(v_counted, false) THEN
    RAISE EXCEPTION 'queue row of (%, %) could not be counted', p_class, p_tenant;
  END IF;

  -- The class's row: counted in if the class's bound has room.
  v_counted := NULL;
  FOR pass IN 1 .. 3 LOOP
    UPDATE classes x SET waiting = x.waiting + 1
     WHERE x.class = p_class AND (p_max_queued IS NULL OR x.waiting < p_max_queued)
    RETURNING true INTO v_counted;
    EXIT WHEN v_counted;
    SELECT x.waiting INTO v_waiting FROM classes x WHERE x.class = p_class FOR UPDATE;
    IF FOUND AND v_waiting >= p_max_queued THEN
      UPDATE queues q SET waiting = q.waiting - 1 WHERE q.class = p_class AND q.tenant = p_tenant
      RETURNING q.running INTO v_running;
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
    IF NOT FOUND THEN
      INSERT INTO classes (class) VALUES (p_class) ON CONFLICT DO NOTHING;
    END IF;
  END LOOP;
  IF NOT coalesce(v_counted, false) THEN
    RAISE EXCEPTION 'class row of % could not be counted', p_class;
  END IF;

  INSERT INTO operations (tenant, id, kind, class, digest, input, state, max_attempts, run_after,
                          deadline_at, created_at, updated_at)
  VALUES (p_tenant, p_id, p_kind, p_class, p_digest, p_input, 'queued',
          p_max_attempts, v_run_after, v_now + p_deadline_ms, v_now, v_now)
  ON CONFLICT (tenant, id) DO NOTHING
  RETURNING * INTO r;
  IF NOT FOUND THEN
    UPDATE queues q SET waiting = q.waiting - 1 WHERE q.class = p_class AND q.tenant = p_tenant;
    UPDATE classes x SET waiting = x.waiting - 1 WHERE x.class = p_class;
    SELECT * INTO r FROM operations o WHERE o.tenant = p_tenant AND o.id = p_id;
    status := CASE WHEN r.digest = p_digest THEN 'existing' ELSE 'conflict' END;
    op := r;
    RETURN NEXT;
    RETURN;
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
