-- A controller's job schedules by job (`varroa schedules`, and the BFF later): the primary key
-- leads with the cluster, which a reader of one controller does not know, so it would scan the
-- whole table (one row per job of every controller).
CREATE INDEX job_schedules_by_controller ON job_schedules (namespace, controller, job);
