-- Version 26. Budget windows by their end. What reads windows reads those not ended yet (a
-- tenant's usage, the spend and rate gauges of every metrics scrape), and found them by a scan
-- of every window kept: those that ended within the last day too, and a per-tenant call rate of
-- one-second windows keeps one row a second per busy tenant. The purge finds ended windows by it
-- as well.
-- Older builds: compatible.
CREATE INDEX budgets_end ON budgets (window_start + window_ms);
