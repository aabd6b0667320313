-- The claim, version 5 (version 2's rules and picks, version 4's set-based start). Each candidate
-- tenant's operations are locked up to its share of the round, not up to the whole claim: the
-- share is what the serving loop gives it when every candidate has all it has room for, so with
-- 32 tenants each holding a backlog a claim of 32 locks 32 operations, not 1,024 (each lock is a
-- WAL record and a dirtied page). Only when a candidate has fewer ready than its share, which hands
-- its turns to the others, are the others locked up to their room; the picks are then those of
-- version 4. A round that found fewer candidates than it wanted is the last one (the next would
-- find none), and the class and retry-budget counters are updated in place, calling their
-- functions only to create the rows.
-- The order in which a claim round serves its candidates, as their indexes: the lowest virtual time
-- first (ties: the earlier candidate), each advanced by 1 / weight per operation and served at
-- most its `p_supply`, `p_want` operations in all (store/sqlite/claim.ts, serviceOrder). The
-- claim runs it twice per round: on each candidate's room, for the shares to lock; on what it
-- locked, for the picks.
CREATE FUNCTION fair_order(p_vt double precision[], p_w double precision[], p_supply integer[], p_want integer)
RETURNS integer[]
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
  v_vt double precision[] := p_vt;
  v_served integer[] := array_fill(0, ARRAY[cardinality(p_vt)]);
  v_order integer[] := '{}';
  best integer;
BEGIN
  FOR i IN 1 .. p_want LOOP
    best := NULL;
    FOR k IN 1 .. cardinality(p_vt) LOOP
      IF v_served[k] < p_supply[k] AND (best IS NULL OR v_vt[k] < v_vt[best]) THEN
        best := k;
      END IF;
    END LOOP;
    EXIT WHEN best IS NULL;
    v_served[best] := v_served[best] + 1;
    v_vt[best] := v_vt[best] + 1 / p_w[best];
    v_order := v_order || best;
  END LOOP;
  RETURN v_order;
END
$$;

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
  -- Per candidate: how many it may start (its running cap's room), its share of the round.
  room integer[];
  share integer[];
  v_k integer;
  v_lim integer;
  v_short boolean;
BEGIN
  FOR v_round IN 1 .. 4 LOOP
    EXIT WHEN v_claimed >= p_limit;
    v_want := p_limit - v_claimed;
    t := '{}'; vt := '{}'; w := '{}'; taken := '{}'; room := '{}'; n := 0;
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
             WHERE o.class = p_class AND o.tenant = t[k] AND o.state = 'queued' AND o.run_after <= p_now
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
    -- Fewer candidates than wanted: no other tenant had ready work, the next round finds none.
    EXIT WHEN n < v_want;
  END LOOP;
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
$$;
