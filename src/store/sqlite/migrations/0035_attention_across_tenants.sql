-- Version 35. The operations that wait for an operator (`dead` and `needs_reconciliation`), found
-- across tenants in acceptance order: an admin's listing of every tenant's dead letters reads
-- these entries, not the whole history (the index of migration 13 leads with the tenant). Few
-- operations are in these states, and they enter them once: the index costs a write only there.
-- The listing names the index's condition in the same words (store/sqlite/list.ts).
-- Older builds: compatible.
CREATE INDEX operations_attention ON operations (state, seq)
  WHERE state IN ('dead', 'needs_reconciliation');
