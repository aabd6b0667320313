-- Version 35. SQLite's migration of this number indexes the operations that wait for an operator
-- (`dead`, `needs_reconciliation`) across tenants. PostgreSQL's index of every settled state in
-- acceptance order (`operations_state`, version 1) already finds them; the schema does not change.
-- Older builds: compatible.
SELECT 1;
