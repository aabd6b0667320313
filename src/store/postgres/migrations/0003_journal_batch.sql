-- The effect journal in batches: several attempts' journal writes in one round trip and one
-- commit (group commit), each item under its own rules and with its own answer, exactly as the
-- single-item functions give it. Items are applied in order; a refusal of one (lease lost,
-- cancel pending, a cap or budget) writes nothing for it and does not affect the others.
--
-- Lock safety: the items of one batch belong to different operations leased by one worker, so
-- no other batch (of this worker or another) locks the same operation rows; the engine sends
-- effects that draw on budgets one by one, so budget rows are never locked in a batch's order.

-- p_items: [{tenant, id, epoch, name, key, provider, cost, bKey[], bLimit[], bWindow[], bCost[],
-- bSpend[], maxCalls}]
CREATE FUNCTION effect_begin_many(p_now bigint, p_items jsonb)
RETURNS TABLE (ord integer, status text, clock bigint, refused_by text, retry_after bigint, calls bigint,
               eff effects)
LANGUAGE plpgsql SET search_path FROM CURRENT
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
               p_now, it->>'tenant', it->>'id', (it->>'epoch')::integer, it->>'name', it->>'key',
               it->>'provider', (it->>'cost')::bigint,
               ARRAY(SELECT jsonb_array_elements_text(it->'bKey')),
               ARRAY(SELECT jsonb_array_elements_text(it->'bLimit')::bigint),
               ARRAY(SELECT jsonb_array_elements_text(it->'bWindow')::bigint),
               ARRAY(SELECT jsonb_array_elements_text(it->'bCost')::bigint),
               ARRAY(SELECT jsonb_array_elements_text(it->'bSpend')::boolean),
               (it->>'maxCalls')::integer) b;
  END LOOP;
END
$$;

-- p_items: [{tenant, id, epoch, name, state, result, reference, error}] (result and error as
-- JSON text, as effect_mark takes them).
CREATE FUNCTION effect_mark_many(p_now bigint, p_items jsonb)
RETURNS TABLE (ord integer, ok boolean)
LANGUAGE plpgsql SET search_path FROM CURRENT
AS $$
DECLARE
  it jsonb;
  i integer := 0;
BEGIN
  FOR it IN SELECT e.value FROM jsonb_array_elements(p_items) WITH ORDINALITY AS e(value, n) ORDER BY e.n LOOP
    i := i + 1;
    ord := i;
    ok := effect_mark(p_now, it->>'tenant', it->>'id', (it->>'epoch')::integer, it->>'name', it->>'state',
                      it->>'result', it->>'reference', it->>'error');
    RETURN NEXT;
  END LOOP;
END
$$;
