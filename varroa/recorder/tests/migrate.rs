//! The schema against a real PostgreSQL: applied once, concurrent replicas, edited and newer
//! schemas refused.

use varroa_recorder::migrate::{self, MigrateError};
use varroa_recorder::testing::PgServer;

async fn client(pg: &PgServer, db: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&pg.config(db), tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    client
}

#[tokio::test]
async fn migrations_apply_once_even_from_replicas_starting_together() {
    let pg = PgServer::start().unwrap();
    pg.create_database("records").await.unwrap();
    let mut a = client(&pg, "records").await;
    let mut b = client(&pg, "records").await;
    let (ra, rb) = tokio::join!(migrate::migrate(&mut a), migrate::migrate(&mut b));
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    let all: Vec<i64> = (1..=migrate::latest()).collect();
    assert!(
        (ra == all && rb.is_empty()) || (rb == all && ra.is_empty()),
        "one replica applies, the other finds it done: {ra:?} {rb:?}"
    );
    assert!(migrate::migrate(&mut a).await.unwrap().is_empty());
    for table in [
        "runs",
        "stages",
        "test_summaries",
        "job_schedules",
        "activity",
        "processed_events",
        "claims",
        "claim_sequences",
        "log_deletions",
    ] {
        let n: i64 = a
            .query_one("SELECT count(*) FROM information_schema.tables WHERE table_name = $1", &[&table])
            .await
            .unwrap()
            .get(0);
        assert_eq!(n, 1, "table {table}");
    }
}

#[tokio::test]
async fn an_edited_or_newer_schema_is_refused_and_left_alone() {
    let pg = PgServer::start().unwrap();
    pg.create_database("edited").await.unwrap();
    let mut c = client(&pg, "edited").await;
    migrate::migrate(&mut c).await.unwrap();
    c.execute("UPDATE schema_migrations SET checksum = 'abc' WHERE version = 1", &[]).await.unwrap();
    let e = migrate::migrate(&mut c).await.unwrap_err();
    assert!(matches!(e, MigrateError::Changed { version: 1, .. }), "{e}");
    assert!(e.to_string().contains("add a new one"), "{e}");

    pg.create_database("newer").await.unwrap();
    let mut c = client(&pg, "newer").await;
    migrate::migrate(&mut c).await.unwrap();
    c.execute("INSERT INTO schema_migrations (version, name, checksum) VALUES (999, 'future', 'x')", &[])
        .await
        .unwrap();
    let e = migrate::migrate(&mut c).await.unwrap_err().to_string();
    assert!(e.contains("schema version 999") && e.contains("newer"), "{e}");
}

#[test]
fn the_fixture_survives_a_stop_and_a_kill() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut pg = PgServer::start().unwrap();
    rt.block_on(async {
        let c = client(&pg, "postgres").await;
        c.batch_execute("CREATE TABLE kept (n int); INSERT INTO kept VALUES (7)").await.unwrap();
    });
    pg.stop();
    assert!(std::net::TcpStream::connect(("127.0.0.1", pg.port())).is_err(), "stopped");
    pg.start_again().unwrap();
    pg.kill();
    pg.start_again().unwrap();
    rt.block_on(async {
        let c = client(&pg, "postgres").await;
        let n: i32 = c.query_one("SELECT n FROM kept", &[]).await.unwrap().get(0);
        assert_eq!(n, 7, "the data survives a stop and a kill");
    });
}
