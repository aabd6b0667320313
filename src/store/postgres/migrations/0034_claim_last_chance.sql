-- Version 34: a claim may be told to pass over operations on their last chance: those with
-- `p_pass_over` lease expiries or more, whom one more expiry would park as a crash loop. A worker
-- already running such an operation claims with it set, so that two of them never share a process:
-- a crash then reaches one operation on its last chance only, and an operation that ran beside a
-- poison one is not taken to `crash-loop` with it (docs/handlers.md, "What a handler must not do
-- to its process").
--
-- The claim is version 21's with that filter on the operations it reads (NULL: none passed over).
-- A tenant whose ready work is all passed over stays a candidate (its `ready_at` is untouched:
-- other workers may take it) and is served nothing; nothing was held under a lock, so the claim
-- is not marked contended for it. Version 21's signature stays, for older builds: it is this
-- claim passing over nothing.
-- Older builds: compatible.

CREATE OR REPLACE FUNCTION claim(p_class text, p_owner text, p_limit integer, p_lease_ms bigint, p_now bigint, p_bucket_ms bigint, p_shard integer, p_pass_over integer)
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
  -- The class's virtual clock: the latest start tag served. A tenant whose virtual time is behind
  -- it was not backlogged meanwhile (idle, its work delayed, or at its running cap) and starts
  -- from it, as in start-time fair queuing: waiting is not banked as credit.
  v_clock double precision;
  -- The latest start tag this claim serves.
  v_top double precision;
BEGIN
  IF p_limit <= 0 THEN
    RETURN;
  END IF;
  SELECT x.vclock INTO v_clock FROM classes x WHERE x.class = p_class;
  v_clock := coalesce(v_clock, 0);
  v_top := v_clock;
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
    l_vtime := greatest(l_vtime, v_clock);
    RETURN QUERY
      WITH picked AS (
        SELECT o.seq, o.started_at IS NULL AS never FROM operations o
         WHERE o.class = p_class AND o.tenant = l_tenant AND o.state = 'queued'
           AND o.run_after BETWEEN l_ready_at AND p_now
           AND (p_pass_over IS NULL OR o.lease_expiries < p_pass_over)
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
        SELECT count(*)::integer AS n,
               (SELECT count(*) FROM picked p WHERE p.never)::integer AS firsts,
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
        INSERT INTO classes AS x (class, waiting, vclock)
        SELECT p_class, -y.n, vtime_after(l_vtime, l_weight, y.n - 1) FROM tally y
         WHERE y.n > 0 AND (SELECT count(*) FROM served) >= 0
        ON CONFLICT (class) DO UPDATE SET waiting = x.waiting + excluded.waiting,
           vclock = greatest(x.vclock, excluded.vclock)
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
      vt := vt || greatest(c.vtime, v_clock);
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
               AND (p_pass_over IS NULL OR o.lease_expiries < p_pass_over)
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
      v_top := greatest(v_top, vt[v_k]);
      vt[v_k] := vt[v_k] + 1 / w[v_k];
      v_pick := v_pick || ops[off[v_k] + taken[v_k]];
      v_claimed := v_claimed + 1;
    END LOOP;
    IF p_bucket_ms IS NOT NULL THEN
      -- First attempts: operations never started before (a deferral or a release gives the attempt
      -- back, so attempt 1 may be a second start). Read before the start sets `started_at`.
      SELECT v_firsts + count(*) INTO v_firsts FROM operations o WHERE o.seq = ANY (v_pick) AND o.started_at IS NULL;
    END IF;
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
    FOR k IN 1 .. n LOOP
      UPDATE queues SET running = running + taken[k], waiting = waiting - taken[k], vtime = vt[k],
             ready_at = (SELECT min(o.run_after) FROM operations o
                          WHERE o.class = p_class AND o.tenant = t[k] AND o.state = 'queued'
                            AND o.run_after >= ra[k])
       WHERE class = p_class AND tenant = t[k];
    END LOOP;
    v_clock := v_top;
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
    UPDATE classes x SET waiting = x.waiting - v_claimed, vclock = greatest(x.vclock, v_top) WHERE x.class = p_class;
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


CREATE OR REPLACE FUNCTION claim(p_class text, p_owner text, p_limit integer, p_lease_ms bigint, p_now bigint, p_bucket_ms bigint, p_shard integer)
 RETURNS SETOF operations
 LANGUAGE sql
 SET search_path FROM CURRENT
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
AS $$
  SELECT * FROM claim(p_class, p_owner, p_limit, p_lease_ms, p_now, p_bucket_ms, p_shard, NULL)
$$
;
