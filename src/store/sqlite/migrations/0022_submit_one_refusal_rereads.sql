-- Version 22. PostgreSQL's migration of this number has a submit refused at a full cap look
-- again for its own id, accepted by a concurrent submit while it waited for the cap's lock; this
-- store serialises its writers, so no such race exists, and its schema does not change.
SELECT 1;
