-- Version 4. PostgreSQL's migration of this number makes its hot paths set-based; SQLite's
-- batches already run item by item inside one transaction, where a statement costs microseconds,
-- not a round trip (store/sqlite/).
--
-- The claim reads its candidates `ORDER BY vtime, tenant` (claim.ts). The index of version 1 ends
-- at `vtime`, so tenants tied on virtual time (every tenant a backlog has not served yet) were
-- sorted in a temporary B-tree on every claim: 4.1 ms per candidate query with 10,000 waiting
-- tenants against 0.33 ms when the index carries `tenant` too (the PostgreSQL index always did).
DROP INDEX queues_schedule;
CREATE INDEX queues_schedule ON queues (class, vtime, tenant) WHERE ready_at IS NOT NULL;
