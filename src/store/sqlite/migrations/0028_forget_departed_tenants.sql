-- Version 28. Once, the queue rows of tenants with no operation left. The retention purge of this
-- build deletes a tenant's rows with its last operation; rows of tenants whose operations earlier
-- builds purged would otherwise stay for ever. A row holding work, or of
-- a tenant with any operation (a finished one, a dead letter), stays. A submit of such a tenant
-- running meanwhile waits for the row and counts the tenant in afresh, as after the purge.
-- Older builds: compatible.
DELETE FROM queues
 WHERE waiting = 0 AND running = 0 AND ready_at IS NULL
   AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.tenant = queues.tenant);
