-- Version 5. PostgreSQL's migration of this number makes its claim lock each candidate tenant's
-- operations only up to its share of the claim; SQLite's claim is code (claim.ts, `readShares`),
-- and its schema does not change.
SELECT 1;
