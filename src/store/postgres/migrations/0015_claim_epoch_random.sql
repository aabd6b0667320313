-- Version 15. A claim's epoch no longer follows from the one before it: it grows by 1 plus a
-- random step below 2^31, so a claim whose commit is lost (a server crash under
-- `synchronous_commit = off`, a failover to an asynchronous standby) is not reissued under the same
-- number, and the worker that still holds it is refused at its next fenced write (heartbeat,
-- journal entry, end) instead of passing the fence beside the worker of the new claim. Two claims
-- from the same row collide once in 2^31. The epoch is therefore a bigint wherever it is stored or
-- passed; the functions that take one are recreated with the wider type, their bodies otherwise
-- those of their latest versions (finish_many 10, lease_extend 1, the journal's 2, 3 and 11,
-- claim 12). SQLite's integers are 64-bit already: its migration of this number changes nothing.

ALTER TABLE operations ALTER COLUMN epoch TYPE bigint;
ALTER TABLE attempts ALTER COLUMN epoch TYPE bigint;
ALTER TABLE effects ALTER COLUMN epoch TYPE bigint;

DROP FUNCTION finish_many(bigint, text[], text[], integer[], text[], text[], text[], bigint[], boolean);
DROP FUNCTION lease_extend(bigint, text[], text[], integer[], bigint);
DROP FUNCTION effect_begin(bigint, text, text, integer, text, text, text, bigint, text[], bigint[], bigint[], bigint[],
                           boolean[], integer);
DROP FUNCTION effect_record_send(bigint, text, text, integer, text, text[], bigint[], bigint[], bigint[], boolean[],
                                 integer);
DROP FUNCTION effect_mark(bigint, text, text, integer, text, text, text, text, text);

CREATE FUNCTION finish_many(p_now bigint, p_tenant text[], p_id text[], p_epoch bigint[], p_outcome text[], p_result text[], p_error text[], p_delay_ms bigint[], p_notify boolean)
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
  -- Their attempt rows.
  t_tenant text[] := '{}';
  t_id text[] := '{}';
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
             AND EXISTS (SELECT 1 FROM effects e WHERE e.tenant = x.tenant AND e.op_id = x.id AND e.state = 'pending')
             AS pending,
           x.effect_started_at IS NOT NULL
             AND EXISTS (SELECT 1 FROM effects e WHERE e.tenant = x.tenant AND e.op_id = x.id
                                                   AND e.state IN ('pending', 'committed')) AS no_return
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
$$
;

CREATE FUNCTION lease_extend(p_now bigint, p_tenant text[], p_id text[], p_epoch bigint[], p_lease_ms bigint)
 RETURNS TABLE(ord integer, cancel text)
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
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
$$
;

CREATE OR REPLACE FUNCTION claim(p_class text, p_owner text, p_limit integer, p_lease_ms bigint, p_now bigint, p_bucket_ms bigint, p_shard integer)
 RETURNS SETOF operations
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
AS $$
DECLARE
  v_seen text[] := '{}';
  v_claimed integer := 0;
  v_firsts integer := 0;
  v_want integer;
  n integer;
  c record;
  -- Per candidate of a round: tenant, virtual time, weight, ready time, its operations (offset,
  -- count), taken.
  t text[];
  ra bigint[];
  vt double precision[];
  w double precision[];
  off integer[];
  cnt integer[];
  taken integer[];
  ops bigint[];
  -- The operations a round serves, in service order.
  v_pick bigint[];
  -- Per candidate: how many it may start (its running cap's room), its share of the round.
  room integer[];
  share integer[];
  v_k integer;
  v_lim integer;
  v_short boolean;
  -- The short way's lone candidate.
  l_tenant text;
  l_vtime double precision;
  l_weight double precision;
  l_ready_at bigint;
  l_room integer;
BEGIN
  IF p_limit <= 0 THEN
    RETURN;
  END IF;
  -- The short way. First the candidates, up to two, locked (the row read is the latest version,
  -- whoever committed it since this statement's snapshot).
  SELECT count(*)::integer, min(cand.tenant), min(cand.vtime), min(cand.weight), min(cand.ready_at), min(cand.room)
    INTO n, l_tenant, l_vtime, l_weight, l_ready_at, l_room
    FROM (SELECT q.tenant, q.vtime, q.weight, q.ready_at,
                 least(p_limit, coalesce(q.max_running - q.running, p_limit)) AS room
            FROM queues q
           WHERE q.class = p_class AND q.ready_at <= p_now
             AND (q.max_running IS NULL OR q.running < q.max_running)
           ORDER BY q.vtime, q.tenant
           LIMIT least(2, p_limit)
             FOR UPDATE SKIP LOCKED) cand;
  -- One candidate (or a claim of one, which only the first could serve): the rest in one statement,
  -- whose snapshot is taken now that the tenant's queue row is held. It must be: the new
  -- `ready_at` is the earliest `run_after` this statement sees, and a submit that committed after
  -- an earlier snapshot (before the lock) would have operations it cannot see.
  IF n = 1 THEN
    RETURN QUERY
      WITH picked AS (
        SELECT o.seq FROM operations o
         WHERE o.class = p_class AND o.tenant = l_tenant AND o.state = 'queued'
           AND o.run_after BETWEEN l_ready_at AND p_now
         ORDER BY o.run_after, o.seq
         LIMIT l_room
           FOR UPDATE SKIP LOCKED),
      started AS (
        UPDATE operations o SET state = 'running', attempt = o.attempt + 1,
               epoch = o.epoch + 1 + floor(random() * 2147483648)::bigint,
               started_at = p_now, lease_owner = p_owner, lease_expires_at = p_now + p_lease_ms,
               updated_at = p_now
          FROM picked p
         WHERE o.seq = p.seq
        RETURNING o.*),
      -- How many started, how many of them first attempts, and whether work was passed over: set
      -- here because the data-modifying CTEs below read this one, so it is computed whatever the
      -- result's reader fetches (a claim that started nothing leaves the flag to the general path).
      tally AS (
        SELECT count(*)::integer AS n, (count(*) FILTER (WHERE s.attempt = 1))::integer AS firsts,
               CASE WHEN count(*) > 0 AND count(*) < p_limit
                     AND EXISTS (SELECT 1 FROM queues q
                                  WHERE q.class = p_class AND q.ready_at <= p_now
                                    AND (q.max_running IS NULL OR q.running < q.max_running)
                                    AND q.tenant <> l_tenant)
                    THEN set_config('sluice.claim_contended', 'on', true) END AS contended
          FROM started s),
      served AS (
        UPDATE queues q SET running = q.running + y.n, waiting = q.waiting - y.n,
               vtime = vtime_after(l_vtime, l_weight, y.n),
               ready_at = (SELECT min(o.run_after) FROM operations o
                            WHERE o.class = p_class AND o.tenant = l_tenant AND o.state = 'queued'
                              AND o.run_after >= l_ready_at AND o.seq NOT IN (SELECT p.seq FROM picked p))
          FROM tally y
         WHERE q.class = p_class AND q.tenant = l_tenant AND y.n > 0
        RETURNING 1),
      counted AS (
        INSERT INTO classes AS x (class, waiting)
        SELECT p_class, -y.n FROM tally y WHERE y.n > 0 AND (SELECT count(*) FROM served) >= 0
        ON CONFLICT (class) DO UPDATE SET waiting = x.waiting + excluded.waiting
        RETURNING 1),
      firsts AS (
        INSERT INTO retry_budget AS b (bucket, shard, firsts)
        SELECT p_now - p_now % p_bucket_ms, p_shard, y.firsts FROM tally y
         WHERE y.firsts > 0 AND p_bucket_ms IS NOT NULL AND (SELECT count(*) FROM counted) >= 0
        ON CONFLICT (bucket, shard) DO UPDATE SET firsts = b.firsts + excluded.firsts)
      SELECT s.* FROM started s ORDER BY s.run_after, s.seq;
    IF FOUND THEN
      RETURN;
    END IF;
  END IF;

  -- Version 7's general path.
  FOR v_round IN 1 .. 4 LOOP
    EXIT WHEN v_claimed >= p_limit;
    v_want := p_limit - v_claimed;
    t := '{}'; vt := '{}'; w := '{}'; ra := '{}'; taken := '{}'; room := '{}'; n := 0;
    FOR c IN
      SELECT q.tenant, q.running, q.max_running, q.vtime, q.weight, q.ready_at FROM queues q
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
      ra := ra || c.ready_at;
      taken := taken || 0;
      room := room || least(v_want, coalesce(c.max_running - c.running, v_want));
    END LOOP;
    EXIT WHEN n = 0;
    -- Each candidate's share: what the round serves it when every candidate has its room ready.
    share := array_fill(0, ARRAY[n]);
    FOREACH v_k IN ARRAY fair_order(vt, w, room, v_want) LOOP
      share[v_k] := share[v_k] + 1;
    END LOOP;
    -- Lock each candidate's operations up to its share. One short of its share hands its turns to
    -- the others: then lock every candidate's up to its room (the rows already locked come back
    -- first), and the round serves what it would have served from those.
    FOR pass IN 1 .. 2 LOOP
      off := '{}'; cnt := '{}'; ops := '{}'; v_short := false;
      FOR k IN 1 .. n LOOP
        off := off || coalesce(array_length(ops, 1), 0);
        v_lim := CASE WHEN pass = 1 THEN share[k] ELSE room[k] END;
        IF v_lim > 0 THEN
          ops := ops || ARRAY(
            SELECT o.seq FROM operations o
             WHERE o.class = p_class AND o.tenant = t[k] AND o.state = 'queued'
               AND o.run_after BETWEEN ra[k] AND p_now
             ORDER BY o.run_after, o.seq
             LIMIT v_lim
             FOR UPDATE SKIP LOCKED);
        END IF;
        cnt := cnt || (coalesce(array_length(ops, 1), 0) - off[k]);
        v_short := v_short OR cnt[k] < share[k];
      END LOOP;
      EXIT WHEN NOT v_short;
    END LOOP;
    -- Serve in that order over what was locked, one operation at a time.
    v_pick := '{}';
    FOREACH v_k IN ARRAY fair_order(vt, w, cnt, v_want) LOOP
      taken[v_k] := taken[v_k] + 1;
      vt[v_k] := vt[v_k] + 1 / w[v_k];
      v_pick := v_pick || ops[off[v_k] + taken[v_k]];
      v_claimed := v_claimed + 1;
    END LOOP;
    -- The round's picks start in one statement, returned in the order they were served.
    RETURN QUERY
      WITH started AS (
        UPDATE operations o SET state = 'running', attempt = o.attempt + 1,
               epoch = o.epoch + 1 + floor(random() * 2147483648)::bigint,
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
                          WHERE o.class = p_class AND o.tenant = t[k] AND o.state = 'queued'
                            AND o.run_after >= ra[k])
       WHERE class = p_class AND tenant = t[k];
    END LOOP;
    -- Fewer candidates than wanted: no other tenant had ready work, the next round finds none.
    EXIT WHEN n < v_want;
  END LOOP;
  -- Short of the limit: did a tenant with ready work stay out because another transaction held
  -- its queue row (a submit, a finish, another claimer), or become ready since the candidates
  -- were read? Read without locks, the tenants not served; the caller then claims again soon
  -- instead of waiting for a wake-up that may never come.
  IF v_claimed < p_limit AND EXISTS (
       SELECT 1 FROM queues q
        WHERE q.class = p_class AND q.ready_at <= p_now
          AND (q.max_running IS NULL OR q.running < q.max_running)
          AND q.tenant <> ALL (v_seen)) THEN
    PERFORM set_config('sluice.claim_contended', 'on', true);
  END IF;
  -- The class and retry-budget rows exist after the first claim; their functions, each a call
  -- with its own settings, only when they do not.
  IF v_claimed > 0 THEN
    UPDATE classes x SET waiting = x.waiting - v_claimed WHERE x.class = p_class;
    IF NOT FOUND THEN
      PERFORM classes_move(ARRAY[p_class], ARRAY[-v_claimed]);
    END IF;
  END IF;
  IF v_firsts > 0 AND p_bucket_ms IS NOT NULL THEN
    UPDATE retry_budget b SET firsts = b.firsts + v_firsts
     WHERE b.bucket = p_now - p_now % p_bucket_ms AND b.shard = p_shard;
    IF NOT FOUND THEN
      PERFORM retry_budget_count(p_now - p_now % p_bucket_ms, p_shard, v_firsts, 0, 0);
    END IF;
  END IF;
END
$$
;

CREATE FUNCTION effect_begin(p_now bigint, p_tenant text, p_id text, p_epoch bigint, p_name text, p_key text, p_provider text, p_cost bigint, p_b_key text[], p_b_limit bigint[], p_b_window bigint[], p_b_cost bigint[], p_b_spend boolean[], p_max_calls integer)
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
$$
;

CREATE FUNCTION effect_record_send(p_now bigint, p_tenant text, p_id text, p_epoch bigint, p_name text, p_b_key text[], p_b_limit bigint[], p_b_window bigint[], p_b_cost bigint[], p_b_spend boolean[], p_max_calls integer)
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
$$
;

CREATE FUNCTION effect_mark(p_now bigint, p_tenant text, p_id text, p_epoch bigint, p_name text, p_state text, p_result text, p_reference text, p_error text)
 RETURNS boolean
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
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
BEGIN
  FOR it IN SELECT e.value FROM jsonb_array_elements(p_items) WITH ORDINALITY AS e(value, n) ORDER BY e.n LOOP
    i := i + 1;
    RETURN QUERY
      SELECT i, b.status, b.clock, b.refused_by, b.retry_after, b.calls, b.eff
        FROM effect_begin(
               p_now, it->>'tenant', it->>'id', (it->>'epoch')::bigint, it->>'name', it->>'key',
               it->>'provider', (it->>'cost')::bigint,
               ARRAY(SELECT jsonb_array_elements_text(it->'bKey')),
               ARRAY(SELECT jsonb_array_elements_text(it->'bLimit')::bigint),
               ARRAY(SELECT jsonb_array_elements_text(it->'bWindow')::bigint),
               ARRAY(SELECT jsonb_array_elements_text(it->'bCost')::bigint),
               ARRAY(SELECT jsonb_array_elements_text(it->'bSpend')::boolean),
               (it->>'maxCalls')::integer) b;
  END LOOP;
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
BEGIN
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
$$
;
