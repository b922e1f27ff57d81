-- The build record store (docs/varroa/data-plane.md). Every row is keyed by where it came from:
-- cluster, namespace and controller are stamped by the gateway from the mite's certificate.
-- Every write is an idempotent upsert that does not depend on the order events arrive in: a
-- column is set by the one kind of event that carries it, and a value that can be set again
-- (schedules, test summaries) keeps the one with the latest event time.

CREATE TABLE runs (
    cluster      text        NOT NULL,
    namespace    text        NOT NULL,
    controller   text        NOT NULL,
    job          text        NOT NULL,
    build        bigint      NOT NULL,
    -- The cell whose Jenkins ran it (from `started`; else the cell that sent the first event).
    cell         integer     NOT NULL,
    trigger      text,
    cause        text,
    node         text,
    queued_at    timestamptz,
    started_at   timestamptz,
    finished_at  timestamptz,
    result       text,
    duration_ms  bigint,
    -- queued, running or finished, from what has arrived (a `finished` seen before its
    -- `started` is already finished).
    status       text GENERATED ALWAYS AS (
                     CASE WHEN result IS NOT NULL THEN 'finished'
                          WHEN started_at IS NOT NULL THEN 'running'
                          ELSE 'queued' END) STORED,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster, namespace, controller, job, build)
);
CREATE INDEX runs_by_controller ON runs (namespace, controller, started_at DESC);
-- Retention prunes by age.
CREATE INDEX runs_by_recorded ON runs (recorded_at);

CREATE TABLE stages (
    cluster      text        NOT NULL,
    namespace    text        NOT NULL,
    controller   text        NOT NULL,
    job          text        NOT NULL,
    build        bigint      NOT NULL,
    stage_id     text        NOT NULL,
    name         text        NOT NULL,
    started_at   timestamptz,
    result       text,
    duration_ms  bigint,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster, namespace, controller, job, build, stage_id)
);
CREATE INDEX stages_by_recorded ON stages (recorded_at);

CREATE TABLE test_summaries (
    cluster      text        NOT NULL,
    namespace    text        NOT NULL,
    controller   text        NOT NULL,
    job          text        NOT NULL,
    build        bigint      NOT NULL,
    total        bigint      NOT NULL,
    failed       bigint      NOT NULL,
    skipped      bigint      NOT NULL,
    duration_ms  bigint,
    -- The event time of the summary kept (a later one replaces it; an older one does not).
    event_time   timestamptz NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster, namespace, controller, job, build)
);
CREATE INDEX test_summaries_by_recorded ON test_summaries (recorded_at);

CREATE TABLE job_schedules (
    cluster      text        NOT NULL,
    namespace    text        NOT NULL,
    controller   text        NOT NULL,
    job          text        NOT NULL,
    -- [{"trigger": "cron", "spec": "H/15 * * * *", "next": "..."}]; [] once the job has none.
    schedules    jsonb       NOT NULL,
    event_time   timestamptz NOT NULL,
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (cluster, namespace, controller, job)
);

-- Event ids already applied (the JetStream message id: <cluster>/<namespace>/<controller>/<id>),
-- so that an event delivered again after the stream's duplicate window changes nothing.
CREATE TABLE processed_events (
    msg_id       text        PRIMARY KEY,
    processed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX processed_events_by_time ON processed_events (processed_at);

CREATE TABLE activity (
    id           text        PRIMARY KEY,
    time         timestamptz NOT NULL,
    cluster      text        NOT NULL,
    namespace    text        NOT NULL DEFAULT '',
    controller   text        NOT NULL DEFAULT '',
    cell         integer,
    source       text        NOT NULL,
    kind         text        NOT NULL,
    message      text        NOT NULL DEFAULT ''
);
CREATE INDEX activity_by_time ON activity (time DESC);
CREATE INDEX activity_by_controller ON activity (namespace, controller, time DESC);
