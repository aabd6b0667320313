-- Version 7. PostgreSQL's migration of this number makes its claim say when a lock held by another
-- transaction may have kept it from ready work; SQLite has one writer at a time, its claim sees
-- every ready operation, and its schema does not change.
SELECT 1;
