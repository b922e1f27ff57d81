//! Activity events (`varroa_activity`) into the `activity` table: [`decode`] checks one message,
//! [`ActivityWriter::insert`] inserts a batch in one statement (`INSERT ... SELECT * FROM
//! unnest(...) ON CONFLICT (id) DO NOTHING`): an event seen again is a no-op.

use std::collections::HashSet;

use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Statement};
use varroa_link::activity::ActivityEvent;
use varroa_link::kv::ControllerKey;

/// The longest activity id.
pub const MAX_ID: usize = 200;
/// The longest `source` and `kind`.
pub const MAX_WORD: usize = 64;

/// Why an activity message cannot be recorded (it is terminated, never redelivered).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub String);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn word(field: &str, value: &str, max: usize) -> Result<(), Malformed> {
    if value.is_empty() || value.len() > max || value.chars().any(char::is_control) {
        return Err(Malformed(format!("{field}: must be 1 to {max} bytes without control characters")));
    }
    Ok(())
}

/// Decodes and checks one message of `varroa_activity` published on `subject`: an
/// [`ActivityEvent`] with an id, a source and a kind, whose cluster, namespace and controller are
/// the ones its subject names (`activity.<cluster>.<ns>.<ctrl>`, or `activity.<cluster>._global`
/// with neither namespace nor controller).
pub fn decode(subject: &str, payload: &[u8]) -> Result<ActivityEvent, Malformed> {
    let event: ActivityEvent = serde_json::from_slice(payload)
        .map_err(|e| Malformed(format!("not an activity event (camelCase JSON): {e}")))?;
    word("id", &event.id, MAX_ID)?;
    word("source", &event.source, MAX_WORD)?;
    word("kind", &event.kind, MAX_WORD)?;
    if event.message.contains('\0') {
        return Err(Malformed("message: must not contain NUL characters".into()));
    }
    let expected = if event.namespace.is_empty() && event.controller.is_empty() {
        varroa_link::activity::global_subject(&event.cluster)
    } else {
        ControllerKey::new(&event.namespace, &event.controller)
            .and_then(|key| varroa_link::activity::controller_subject(&event.cluster, &key))
    }
    .map_err(|e| Malformed(format!("event {:?}: {e}", event.id)))?;
    if subject != expected {
        return Err(Malformed(format!("event {:?} is about {expected} but was published on {subject}", event.id)));
    }
    if event.cell.is_some_and(|c| i32::try_from(c).is_err()) {
        return Err(Malformed(format!("event {:?}: cell is larger than {}", event.id, i32::MAX)));
    }
    Ok(event)
}

const INSERT_SQL: &str = "INSERT INTO activity (id, time, cluster, namespace, controller, cell, source, kind, message) \
     SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::int4[], \
                          $7::text[], $8::text[], $9::text[]) \
     ON CONFLICT (id) DO NOTHING RETURNING id";

/// Inserts activity over one PostgreSQL session.
pub struct ActivityWriter {
    client: Client,
    insert: Statement,
}

impl std::fmt::Debug for ActivityWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActivityWriter").field("closed", &self.client.is_closed()).finish()
    }
}

/// What inserting an event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    /// A new row.
    New,
    /// The id was there already (or twice in the batch).
    Duplicate,
}

impl ActivityWriter {
    /// Prepares the statement on `client` (the schema must be migrated).
    pub async fn new(client: Client) -> Result<ActivityWriter, tokio_postgres::Error> {
        let insert = client.prepare(INSERT_SQL).await?;
        Ok(ActivityWriter { client, insert })
    }

    /// Whether the session is gone.
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Inserts `events` in one statement; the outcome of each, in order.
    pub async fn insert(&mut self, events: &[ActivityEvent]) -> Result<Vec<Inserted>, tokio_postgres::Error> {
        let mut seen = HashSet::new();
        let mut rows: Vec<&ActivityEvent> = events.iter().filter(|e| seen.insert(e.id.as_str())).collect();
        rows.sort_by(|a, b| a.id.cmp(&b.id));
        let id: Vec<&str> = rows.iter().map(|e| e.id.as_str()).collect();
        let time: Vec<jiff::Timestamp> = rows.iter().map(|e| e.time).collect();
        let cluster: Vec<&str> = rows.iter().map(|e| e.cluster.as_str()).collect();
        let namespace: Vec<&str> = rows.iter().map(|e| e.namespace.as_str()).collect();
        let controller: Vec<&str> = rows.iter().map(|e| e.controller.as_str()).collect();
        let cell: Vec<Option<i32>> = rows.iter().map(|e| e.cell.and_then(|c| i32::try_from(c).ok())).collect();
        let source: Vec<&str> = rows.iter().map(|e| e.source.as_str()).collect();
        let kind: Vec<&str> = rows.iter().map(|e| e.kind.as_str()).collect();
        let message: Vec<&str> = rows.iter().map(|e| e.message.as_str()).collect();
        let params: [&(dyn ToSql + Sync); 9] =
            [&id, &time, &cluster, &namespace, &controller, &cell, &source, &kind, &message];
        let inserted = self.client.query(&self.insert, &params).await?;
        let mut new: HashSet<String> = inserted.iter().map(|r| r.get(0)).collect();
        Ok(events.iter().map(|e| if new.remove(&e.id) { Inserted::New } else { Inserted::Duplicate }).collect())
    }
}
