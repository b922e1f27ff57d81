-- The build claims ledger (src/ledger.rs, docs/varroa/data-plane.md "Build claims").
--
-- claims: one row per trigger of a job that was granted, to the claim (and the cell) that got
-- it. A trigger is granted once (the primary key); a claim id names one claim (the unique index),
-- so asking again finds the same row and gets the same answer. Refusals are not stored: a
-- refused claim asked again finds the holder again.
CREATE TABLE claims (
    cluster      text        NOT NULL,
    namespace    text        NOT NULL,
    controller   text        NOT NULL,
    job          text        NOT NULL,
    trigger      text        NOT NULL,
    claim_id     text        NOT NULL,
    cell         integer     NOT NULL,
    build        bigint      NOT NULL,
    granted_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster, namespace, controller, job, trigger)
);
CREATE UNIQUE INDEX claims_by_id ON claims (cluster, namespace, controller, claim_id);
-- Retention prunes by age.
CREATE INDEX claims_by_age ON claims (granted_at);

-- The last build number granted per job, across every cell of the controller. It is taken
-- (INSERT ... ON CONFLICT DO UPDATE SET last_build = last_build + 1) in the transaction that
-- inserts the claim, so a number exists only if its claim committed: gap-free per job. Never
-- pruned: a pruned sequence would hand out its numbers again.
CREATE TABLE claim_sequences (
    cluster      text        NOT NULL,
    namespace    text        NOT NULL,
    controller   text        NOT NULL,
    job          text        NOT NULL,
    last_build   bigint      NOT NULL,
    PRIMARY KEY (cluster, namespace, controller, job)
);
