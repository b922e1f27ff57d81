-- Retention of console logs (src/log_retention.rs, docs/varroa/data-plane.md "Retention").
--
-- log_deletions: the builds whose run rows retention deleted and whose logs are still to be
-- deleted from the log store. The runs retention statement inserts a build here in the same
-- statement that deletes its run (when the recorder has a log store), so a log is never
-- forgotten: the row stays until every object under the build's log prefix is gone, whatever
-- fails in between (the store, the recorder, PostgreSQL). attempts and last_error say what the
-- store answered so far; rows that failed are tried after the others.
CREATE TABLE log_deletions (
    cluster      text        NOT NULL,
    namespace    text        NOT NULL,
    controller   text        NOT NULL,
    job          text        NOT NULL,
    build        bigint      NOT NULL,
    queued_at    timestamptz NOT NULL DEFAULT now(),
    attempts     integer     NOT NULL DEFAULT 0,
    last_error   text,
    PRIMARY KEY (cluster, namespace, controller, job, build)
);
-- The order the pruner takes them in.
CREATE INDEX log_deletions_by_turn ON log_deletions (attempts, queued_at);
