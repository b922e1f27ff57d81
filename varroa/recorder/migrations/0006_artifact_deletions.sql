-- Retention of archived artifacts (src/log_retention.rs): a pruned run's artifacts are under the
-- prefix of the cell that ran it (artifacts/<cluster>/<ns>/<ctrl>/cell-<n>/<job>/<build>/), so the
-- queue keeps the run's cell beside its key. NULL for rows queued before this migration: the
-- pruner then deletes the build's artifacts under every cell's prefix.
ALTER TABLE log_deletions ADD COLUMN cell integer;
