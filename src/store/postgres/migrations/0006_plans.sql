-- Version 6: how the store's functions plan their statements. Nothing they compute changes.
--
-- Every statement inside these functions finds its rows by key: a primary key, a unique key, or
-- a tenant's entry in a partial index. PostgreSQL's default plan choice got two things wrong here,
-- both measured on this schema:
--
-- 1. A plan cached while a table was small stayed with the connection as the table grew. After
--    five calls a statement may switch to a generic plan, costed with the statistics of that
--    moment; on a new schema (or one autovacuum has not analysed yet) those say "a few pages", and
--    the claim's `UPDATE operations … WHERE seq = ANY (…)` was cached as a sequential scan: every
--    later claim on that connection read the whole table (750 rows per claim after 1,500
--    operations, and it grows with the table, until an ANALYZE happens to invalidate the plan).
-- 2. Where the generic plan looked worse than the custom ones, every call planned every statement
--    afresh: about half of the claim's and the finish's time on the server went to planning.
--
-- So each function now plans once per connection, generically (no planning per call), with
-- sequential and bitmap scans disabled: the planner can then only reach a row through an index,
-- whatever the statistics say at the time, and a key lookup is the right plan at every size.
-- Bitmap scans go too because they never mark index entries of dead rows as dead: the queue rows
-- are updated on every submit, claim and finish, each update leaves index entries behind, and a
-- bitmap scan read all of them again on every call until the next vacuum; an index scan marks
-- them as it passes, and the next scans skip them. A statement with no usable index still runs
-- (a disabled scan is only priced out). The engine's test "plans on PostgreSQL" makes the plans on
-- empty tables, grows the table by 20,000 rows and counts the rows the server reads per operation.

ALTER FUNCTION budget_draw(bigint,text[],bigint[],bigint[],bigint[],boolean[])
  SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off;
ALTER FUNCTION budget_settle(jsonb,jsonb)
  SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off;
ALTER FUNCTION claim(text,text,integer,bigint,bigint,bigint,integer)
  SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off;
ALTER FUNCTION classes_move(text[],integer[])
  SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off;
ALTER FUNCTION effect_begin(bigint,text,text,integer,text,text,text,bigint,text[],bigint[],bigint[],bigint[],boolean[],integer)
  SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off;
ALTER FUNCTION effect_begin_each(bigint,jsonb)
  SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off;
ALTER FUNCTION effect_begin_many(bigint,jsonb)
  SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off;
ALTER FUNCTION effect_mark(bigint,text,text,integer,text,text,text,text,text)
  SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off;
ALTER FUNCTION effect_mark_each(bigint,jsonb)
  SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off;
ALTER FUNCTION effect_mark_many(bigint,jsonb)
  SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off;
ALTER FUNCTION effect_record_send(bigint,text,text,integer,text,text[],bigint[],bigint[],bigint[],boolean[],integer)
  SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off;
ALTER FUNCTION finish_many(bigint,text[],text[],integer[],text[],text[],text[],bigint[],boolean)
  SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off;
ALTER FUNCTION lease_extend(bigint,text[],text[],integer[],bigint)
  SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off;
ALTER FUNCTION queue_enter(text,text,integer,bigint,integer,boolean,double precision,integer,integer)
  SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off;
ALTER FUNCTION queue_leave(text,text,integer,integer)
  SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off;
ALTER FUNCTION retry_budget_count(bigint,integer,bigint,bigint,bigint)
  SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off;
ALTER FUNCTION retry_budget_take(bigint,bigint,bigint,double precision,double precision,integer)
  SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off;
ALTER FUNCTION submit_many(bigint,text[],text[],text[],text[],text[],text[],integer[],bigint[],bigint[],boolean[],double precision[],integer[],integer[],integer[],boolean)
  SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off;
ALTER FUNCTION submit_many_each(bigint,text[],text[],text[],text[],text[],text[],integer[],bigint[],bigint[],boolean[],double precision[],integer[],integer[],integer[],boolean)
  SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off;
ALTER FUNCTION submit_one(bigint,text,text,text,text,text,text,integer,bigint,bigint,boolean,double precision,integer,integer,integer,boolean)
  SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off;
