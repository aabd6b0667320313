-- Version 30. The retry budget allows a retry only if, counted, retries stay within
-- `floor + ratio × first attempts`. It allowed one while the retries before it were under that
-- bound, so a fractional bound was rounded up: 5 first attempts at floor 10, ratio 0.1 (10.5)
-- allowed 11 retries, and at floor 0 one first attempt allowed a retry, ten times the ratio. The
-- comparison now counts the retry it allows; a bound a rounding error puts a hair under a whole
-- number (0.29 × 100 = 28.999999999999996) still allows that number, as SQLite's does.
-- Older builds: compatible.
CREATE OR REPLACE FUNCTION retry_budget_take(p_now bigint, p_window_ms bigint, p_bucket_ms bigint,
                                             p_ratio double precision, p_floor double precision,
                                             p_shard integer) RETURNS boolean
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
 SET plan_cache_mode TO 'force_generic_plan'
 SET enable_seqscan TO 'off'
 SET enable_bitmapscan TO 'off'
AS $$
DECLARE
  v_now bigint;
  v_firsts bigint;
  v_retries bigint;
  v_allowed boolean;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended('sluice:retry-budget:' || current_schema(), 0));
  v_now := now_ms(p_now);
  SELECT coalesce(sum(b.firsts), 0), coalesce(sum(b.retries), 0) INTO v_firsts, v_retries
    FROM retry_budget b WHERE b.bucket >= v_now - p_window_ms;
  v_allowed := v_retries + 1 <= p_floor + p_ratio * v_firsts + 1e-9;
  PERFORM retry_budget_count(v_now - v_now % p_bucket_ms, p_shard, 0,
                             CASE WHEN v_allowed THEN 1 ELSE 0 END, CASE WHEN v_allowed THEN 0 ELSE 1 END);
  RETURN v_allowed;
END
$$;
