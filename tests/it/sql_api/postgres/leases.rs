//! G1-G3, G9, G10 through SQL: `outbox.try_acquire`, `outbox.renew` and `outbox.release` on
//! the database clock, their TTL bounds and settings, and named-argument calls.

use std::collections::HashSet;

use sqlx::{Executor as _, PgPool, Row as _};
use time::OffsetDateTime;
use uuid::Uuid;

use super::{
    SqlLease, SqlOp, acquire, connect, count, enqueue, migrated, refused, release, renew,
    short_lease_pool, try_acquire, wait_expired,
};

async fn lease_row(pool: &PgPool, resource: &str) -> (Option<Uuid>, i64, Option<OffsetDateTime>) {
    sqlx::query_as("SELECT owner_id, fence, expires_at FROM outbox_leases WHERE resource = $1")
        .bind(resource)
        .fetch_one(pool)
        .await
        .expect("lease row")
}

/// G1, G2: each acquisition gets a larger token (after expiry and after release), with a
/// fresh owner id; a held lease is busy (no row).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g1_sql_tokens_increase_across_acquisitions_and_a_held_lease_is_busy() {
    let db = migrated().await;
    let pool = short_lease_pool(&db).await;
    let first = acquire(&pool, "r", "200 milliseconds").await;
    assert_eq!(first.token, 1);
    assert_eq!(
        try_acquire(&pool, "r", Some("30 seconds")).await.unwrap(),
        None,
        "busy"
    );
    wait_expired(&pool, "r").await;
    let second = acquire(&pool, "r", "30 seconds").await;
    assert!(release(&pool, "r", &second).await.unwrap());
    let third = acquire(&pool, "r", "30 seconds").await;
    assert_eq!((second.token, third.token), (2, 3));
    let owners: HashSet<Uuid> = [first, second, third].iter().map(|l| l.owner_id).collect();
    assert_eq!(owners.len(), 3, "a fresh owner id per acquisition");
    assert_eq!(
        lease_row(&pool, "r").await,
        (Some(third.owner_id), 3, Some(third.expires_at))
    );
}

/// G3: renewal keeps the token and extends the expiry while the lease is live, and is NULL
/// once it expired; an old owner can neither renew nor release the newer owner's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g3_sql_renew_and_release_need_the_live_owner_and_token() {
    let db = migrated().await;
    let pool = short_lease_pool(&db).await;
    let old = acquire(&pool, "r", "300 milliseconds").await;
    let renewed = renew(&pool, "r", &old, Some("400 milliseconds"))
        .await
        .unwrap()
        .expect("a live lease renews");
    assert!(renewed > old.expires_at);
    assert_eq!(
        lease_row(&pool, "r").await,
        (Some(old.owner_id), old.token, Some(renewed))
    );
    wait_expired(&pool, "r").await;
    assert_eq!(
        renew(&pool, "r", &old, Some("30 seconds")).await.unwrap(),
        None,
        "an expired lease does not renew"
    );
    let newer = acquire(&pool, "r", "30 seconds").await;
    let held = lease_row(&pool, "r").await;
    assert_eq!(
        renew(&pool, "r", &old, Some("30 seconds")).await.unwrap(),
        None
    );
    assert!(
        !release(&pool, "r", &old).await.unwrap(),
        "not the old owner's to release"
    );
    let forged = SqlLease {
        owner_id: old.owner_id,
        ..newer
    };
    assert!(
        !release(&pool, "r", &forged).await.unwrap(),
        "the token alone is not enough"
    );
    assert_eq!(
        lease_row(&pool, "r").await,
        held,
        "the newer lease is untouched"
    );
    assert!(release(&pool, "r", &newer).await.unwrap());
    assert_eq!(lease_row(&pool, "r").await, (None, newer.token, None));
}

/// G10: TTLs outside the bounds (5 s..=300 s by default), finer than a millisecond or missing
/// are OB005 `ttl`, and nothing is leased; the session settings move the bounds, and a bad
/// setting is refused naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g10_sql_lease_ttls_are_bounded_and_the_settings_move_the_bounds() {
    let db = migrated().await;
    let mut c = connect(&db).await;
    for ttl in [
        Some("4999 milliseconds"),
        Some("301 seconds"),
        Some("5.0005 seconds"),
        None,
    ] {
        let r = refused(try_acquire(&mut c, "r", ttl).await, "OB005");
        assert_eq!(r.column.as_deref(), Some("ttl"), "{ttl:?}: {r:?}");
    }
    assert_eq!(
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM outbox_leases")
            .fetch_one(&mut c)
            .await
            .unwrap(),
        0
    );
    let lease = acquire(&mut c, "r", "5 seconds").await;
    let r = refused(renew(&mut c, "r", &lease, Some("1 hour")).await, "OB005");
    assert_eq!(r.column.as_deref(), Some("ttl"));
    acquire(&mut c, "r2", "300 seconds").await;

    c.execute("SET outbox.lease_min_ttl = '100ms'")
        .await
        .unwrap();
    c.execute("SET outbox.lease_max_ttl = '1 hour'")
        .await
        .unwrap();
    acquire(&mut c, "r3", "150 milliseconds").await;
    acquire(&mut c, "r4", "30 minutes").await;
    assert!(
        renew(&mut c, "r", &lease, Some("1 hour"))
            .await
            .unwrap()
            .is_some()
    );
    let r = refused(try_acquire(&mut c, "r5", Some("61 minutes")).await, "OB005");
    assert_eq!(r.column.as_deref(), Some("ttl"));

    for (setting, value) in [
        ("outbox.lease_min_ttl", "soon"),
        ("outbox.lease_max_ttl", "2 days"),
        ("outbox.lease_min_ttl", "2 hours"),
    ] {
        let mut s = connect(&db).await;
        sqlx::query("SELECT set_config($1, $2, false)")
            .bind(setting)
            .bind(value)
            .execute(&mut s)
            .await
            .unwrap();
        let r = refused(try_acquire(&mut s, "r6", Some("30 seconds")).await, "OB005");
        assert_eq!(
            r.column.as_deref(),
            Some(setting),
            "{setting} = {value}: {r:?}"
        );
    }
}

/// G9: `dispatcher/…` leases are outbox-dispatcher's: every SQL entry point refuses them
/// (OB005 `resource`) and leaves no lease row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g9_sql_entry_points_refuse_dispatcher_partition_leases() {
    let db = migrated().await;
    let pool = PgPool::connect(db.url()).await.unwrap();
    let lease = acquire(&pool, "r", "30 seconds").await;
    let resource = "dispatcher/0";
    let r = refused(
        try_acquire(&pool, resource, Some("30 seconds")).await,
        "OB005",
    );
    assert_eq!(r.column.as_deref(), Some("resource"));
    let r = refused(
        renew(&pool, resource, &lease, Some("30 seconds")).await,
        "OB005",
    );
    assert_eq!(r.column.as_deref(), Some("resource"));
    let r = refused(release(&pool, resource, &lease).await, "OB005");
    assert_eq!(r.column.as_deref(), Some("resource"));
    let r = refused(
        enqueue(&pool, resource, &lease, &SqlOp::post("k", "{}")).await,
        "OB005",
    );
    assert_eq!(r.column.as_deref(), Some("resource"));
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM outbox_leases WHERE resource LIKE 'dispatcher/%'"
        )
        .await,
        0
    );
    assert_eq!(count(&pool, "SELECT count(*) FROM outbox_ops").await, 0);
}

/// An op row as the named-argument test reads it: key, method, headers, body, content type,
/// order key, expire_with_generation, and whether it is due at once.
type StoredOp = (
    String,
    String,
    String,
    Vec<u8>,
    Option<String>,
    Option<String>,
    bool,
    bool,
);

/// Named arguments in any order, and NULL for every optional argument, as drivers without
/// positional parameters or a worker skipping options would call the functions; the stored
/// op takes the defaults (no headers, empty body, ordered by the resource, due now).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_functions_take_named_arguments_in_any_order_and_null_optionals() {
    let db = migrated().await;
    let pool = PgPool::connect(db.url()).await.unwrap();
    let row = sqlx::query(
        "SELECT token, owner_id FROM outbox.try_acquire(ttl => '30 seconds', resource => 'named')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let (token, owner_id): (i64, Uuid) = (row.get(0), row.get(1));
    let done: (Uuid, i64, bool) = sqlx::query_as(
        "SELECT op_id, seq, duplicate FROM outbox.enqueue(traceparent => NULL, \
         path => '/v1/statements', idempotency_key => 'named-1', token => $1, \
         expire_with_generation => NULL, destination => 'statements', owner_id => $2, \
         not_before => NULL, method => 'post', supersede_pending => NULL, resource => 'named', \
         headers => NULL, body => NULL, unordered => NULL, content_type => NULL, \
         order_key => NULL)",
    )
    .bind(token)
    .bind(owner_id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(!done.2);
    let minimal: bool = sqlx::query_scalar(
        "SELECT duplicate FROM outbox.enqueue(idempotency_key => 'named-2', method => 'DELETE', \
         path => '/v1/statements/7', destination => 'statements', token => $1, owner_id => $2, \
         resource => 'named')",
    )
    .bind(token)
    .bind(owner_id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(!minimal);
    let stored: Vec<StoredOp> = sqlx::query_as(
        "SELECT idempotency_key, method, headers::text, body, content_type, order_key, \
             expire_with_generation, next_attempt_at - created_at < interval '1 second' \
             FROM outbox_ops ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let default = |key: &str, method: &str| {
        (
            key.to_owned(),
            method.to_owned(),
            "[]".to_owned(),
            Vec::new(),
            None,
            Some("named".to_owned()),
            false,
            true,
        )
    };
    assert_eq!(
        stored,
        [default("named-1", "POST"), default("named-2", "DELETE")]
    );
    assert_eq!(
        count(
            &pool,
            "SELECT count(*) FROM outbox_ops WHERE trace_context IS NOT NULL"
        )
        .await,
        0
    );

    let renewed: Option<OffsetDateTime> = sqlx::query_scalar(
        "SELECT outbox.renew(ttl => '60 seconds', token => $1, resource => 'named', owner_id => $2)",
    )
    .bind(token)
    .bind(owner_id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(renewed.is_some());
    let released: bool = sqlx::query_scalar(
        "SELECT outbox.release(token => $1, owner_id => $2, resource => 'named')",
    )
    .bind(token)
    .bind(owner_id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(released);
    assert_eq!(lease_row(&pool, "named").await, (None, token, None));
}
