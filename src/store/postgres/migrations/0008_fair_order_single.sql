-- Version 8: the claim's serving order, with a short way for a single candidate. A claim that
-- finds one tenant with ready work (one tenant's backlog, or a low rate) ran the general loop
-- anyway, stepping through the whole claim limit and appending to an array at each step, twice
-- per round: 21 µs a call for a limit of 32 and a tenant with 32 ready, measured in a loop of
-- 10,000 calls; 1.5 µs this way. One candidate is served up to its supply or the limit, which is
-- what the loop gives (there is no tie to break); the store's property test compares the function
-- with the SQLite store's `serviceOrder` on random candidates.
CREATE OR REPLACE FUNCTION fair_order(p_vt double precision[], p_w double precision[], p_supply integer[], p_want integer)
RETURNS integer[]
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
  v_vt double precision[] := p_vt;
  v_served integer[] := array_fill(0, ARRAY[cardinality(p_vt)]);
  v_order integer[] := '{}';
  best integer;
BEGIN
  IF cardinality(p_vt) = 1 THEN
    RETURN array_fill(1, ARRAY[greatest(0, least(p_supply[1], p_want))]);
  END IF;
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
