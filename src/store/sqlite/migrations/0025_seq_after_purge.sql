-- Version 25. The highest `seq` the retention purge has removed. SQLite gives a new row one more
-- than the highest `seq` left in the table, so once the purge had removed the newest operations
-- (none submitted for a whole retention), the next submit took a position a list cursor may
-- already have passed. A submit that finds this floor at or above every `seq` left takes the one
-- after it; otherwise SQLite numbers the row as before, so a submit writes no page more.
-- Older builds ignore the table: their submits and purges run as they did before it.
-- Older builds: compatible.
CREATE TABLE seq_floor (seq INTEGER NOT NULL);
INSERT INTO seq_floor (seq) VALUES (0);
