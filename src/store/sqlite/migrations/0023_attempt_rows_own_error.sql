-- Version 23. PostgreSQL's migration of this number has an ended attempt's row keep the
-- attempt's own error, as this store always did; its schema does not change.
SELECT 1;
