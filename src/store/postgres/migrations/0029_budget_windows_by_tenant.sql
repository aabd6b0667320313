-- Version 29. Budget windows by the tenant their key names (after its first `:tenant:`), then by
-- their end. A tenant's usage read every tenant's windows in effect and kept its own: with 10,000
-- tenants each holding a spend window, 10,000 rows per read; by this index, one tenant's. Only
-- keys that name a tenant are in it.
-- Older builds: compatible.
CREATE INDEX budgets_tenant ON budgets (substr(key, strpos(key, ':tenant:') + 8), (window_start + window_ms))
  WHERE strpos(key, ':tenant:') > 0;
