-- Version 7: a claim says when it may have left ready work behind. `FOR UPDATE SKIP LOCKED` on the
-- tenants' queue rows keeps claimers from waiting on each other, but a queue row is also locked,
-- until their commit, by a submit, a finish or a rescue of that tenant. A claim that meets such a
-- row passes over the tenant's ready work, and nothing announces it again: the finish announces
-- nothing (only a new submit or a requeue does), so on one tenant's backlog the claim found nothing,
-- and its worker idled until its next poll while work waited.
--
-- The claim (version 5's rules and picks, version 6's plan settings, which a replaced function
-- must state again) now ends, when it is short of its limit, by looking without locks for a tenant
-- it did not serve that has ready work and room to run it; if there is one, it sets the
-- transaction-local setting `sluice.claim_contended`, which the calling statement returns with
-- the rows. The store reports it (`ClaimResult.contended`), and the worker claims again after a
-- short pause rather than waiting for a wake-up. The look costs one index read, bounded like the
-- candidate query before it, on claims that came back short: at a low rate, most claims.

CREATE OR REPLACE FUNCTION claim(p_class text, p_owner text, p_limit integer, p_lease_ms bigint, p_now bigint,
                      p_bucket_ms bigint, p_shard integer)
RETURNS SETOF operations
LANGUAGE plpgsql SET search_path FROM CURRENT
  SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off
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
$$;
