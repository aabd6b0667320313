-- Version 33: an attempt's end reads the effect journal after it has locked the operation.
--
-- finish_many locked each operation and asked whether an effect of it was `pending` (or past the
-- point of no return) in one statement, whose snapshot is taken before the lock is waited for.
-- An effect begin holds the operation's row while it waits (for a budget row, say) and commits
-- its `pending` effect; an end that waited for the row then read the journal as it was before:
-- the operation ended `failed` (not `needs_reconciliation`) or `cancelled` with a `pending`
-- effect, and the effect's budget reservation was never settled. Every other function that
-- decides on the journal (cancel, the rescue, the effect begins and marks) reads it after the
-- lock, in a later statement; this one now does too: it locks its rows in one statement and reads
-- them, with the journal, in the next (one statement more a call, not one an operation).
-- Version 23's function otherwise.
-- Older builds: compatible.

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
  t_error text[] := '{}';
  t_started bigint[] := '{}';
  t_outcome text[] := '{}';
  t_delay bigint[] := '{}';
  c_class text[] := '{}';
  c_delta integer[] := '{}';
BEGIN
  -- Found by key and locked in (class, tenant, seq) order, then read, in a statement of its own:
  -- the read's snapshot is taken once every row is held, so it sees the journal as the last
  -- holder left it. The locking statement's is from before it waited, and a begin that held a row
  -- meanwhile committed its `pending` effect after it (FOR UPDATE re-reads the locked row, not the
  -- effects). A row a rescue moved meanwhile (another epoch, or no longer running) is neither
  -- locked nor read. An operation that never began an effect has no journal rows.
  PERFORM 1
     FROM unnest(p_tenant, p_id, p_epoch) WITH ORDINALITY AS u(tenant, id, epoch, n)
     JOIN operations x ON x.tenant = u.tenant AND x.id = u.id
    WHERE x.epoch = u.epoch AND x.state = 'running'
    ORDER BY x.class, x.tenant, x.seq, u.n
      FOR UPDATE OF x;
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
    -- The attempt's own error: a release or a cancel has none, whatever the operation kept.
    t_error := t_error || v_error;
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
    FROM unnest(e_seq, t_epoch, t_attempt, t_owner, t_started, t_outcome, t_error, t_delay)
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
