-- Retention (src/retention.rs) deletes a run by when it finished, or when it was recorded if it
-- never finished, together with its stages and test summary (found by their primary keys).
-- The indexes on recorded_at of 0001 are not what it reads: one on the age it does read replaces
-- them.
CREATE INDEX runs_by_age ON runs ((COALESCE(finished_at, recorded_at)));
DROP INDEX runs_by_recorded;
DROP INDEX stages_by_recorded;
DROP INDEX test_summaries_by_recorded;
