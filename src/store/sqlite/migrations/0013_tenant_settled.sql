-- Version 13. A tenant's operations by state are indexed only in the settled states, as
-- PostgreSQL's have been from version 1 (`operations_state`). The live states moved an entry of
-- the full index within the tenant's range at every claim and every end: with many tenants
-- waiting, a claim of 32 serves 32 tenants, and each of those moves dirtied a page of its own.
-- With 1,000,000 operations waiting over 10,000 tenants, a processed operation wrote 19.4 kB,
-- now 11.3 (docs/benchmarks.md). Listing a tenant's queued or running operations reads that
-- tenant's rows instead (store/sqlite/list.ts).
DROP INDEX operations_tenant_state;
CREATE INDEX operations_tenant_settled ON operations (tenant, state, seq)
  WHERE state NOT IN ('queued', 'running');
