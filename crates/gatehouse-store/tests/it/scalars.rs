//! `DateTime`, `JSON`, server-set times and the case-insensitive
//! operators, on every backend.

use std::sync::Arc;

use gatehouse_store::{
    AccessContext, Filter, FilterOp, ListQuery, ManualClock, OrderBy, Store, StoreError,
    StoreOptions,
};
use gatehouse_testkit::TestDb;
use serde_json::{Value, json};

use crate::common::row;

const SDL: &str = r#"
type Query { events: [Event!]! }
type Event {
  id: ID!
  title: String!
  at: DateTime
  data: JSON
  createdAt: DateTime! @createdAt
  updatedAt: DateTime! @updatedAt
}
"#;

/// 2026-11-27T16:00:00Z in microseconds.
const T0: i64 = 1_795_795_200_000_000;

async fn open(db: &TestDb, clock: &Arc<ManualClock>) -> Store {
    db.open_with(
        SDL,
        StoreOptions {
            clock: clock.clone(),
            ..Default::default()
        },
    )
    .await
    .unwrap()
}

async fn insert(s: &Store, v: Value) -> Result<gatehouse_store::Row, StoreError> {
    s.entity("Event")
        .unwrap()
        .insert(&AccessContext::system(), row(v))
        .await
}

async fn titles(s: &Store, filter: Option<Filter>, order: Vec<OrderBy>) -> Vec<String> {
    let q = ListQuery {
        filter,
        order,
        ..Default::default()
    };
    s.entity("Event")
        .unwrap()
        .list(&AccessContext::system(), &q)
        .await
        .unwrap()
        .rows
        .into_rows()
        .iter()
        .map(|r| r["title"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datetime_round_trips_as_utc_and_orders_by_instant() {
    for db in TestDb::each().await {
        let clock = Arc::new(ManualClock::at_micros(T0));
        let s = open(&db, &clock).await;
        let b = db.backend();
        // 10:00+05:30 is 04:30Z; 09:00Z is later although its local text sorts first.
        let r = insert(
            &s,
            json!({"title": "india", "at": "2026-11-27T10:00:00+05:30"}),
        )
        .await
        .unwrap();
        assert_eq!(r["at"], "2026-11-27T04:30:00.000000Z", "{b}");
        insert(
            &s,
            json!({"title": "utc", "at": "2026-11-27T09:00:00.1234567Z"}),
        )
        .await
        .unwrap();
        insert(&s, json!({"title": "none"})).await.unwrap();
        let got = s
            .entity("Event")
            .unwrap()
            .get(&AccessContext::system(), r["id"].as_str().unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got["at"], "2026-11-27T04:30:00.000000Z", "{b}");
        assert_eq!(
            titles(&s, None, vec![OrderBy::asc("at")]).await,
            ["india", "utc", "none"],
            "{b}"
        );
        assert_eq!(
            titles(&s, None, vec![OrderBy::desc("at")]).await,
            ["none", "utc", "india"],
            "{b}"
        );
        // Operands are read in any offset and compared as instants.
        let after = Filter::cmp("at", FilterOp::Gt, json!("2026-11-27T12:00:00+05:30"));
        assert_eq!(titles(&s, Some(after), vec![]).await, ["utc"], "{b}");
        let eq = Filter::cmp("at", FilterOp::Eq, json!("2026-11-27T04:30:00Z"));
        assert_eq!(titles(&s, Some(eq), vec![]).await, ["india"], "{b}");
        let bad = insert(&s, json!({"title": "x", "at": "2026-11-27 10:00"})).await;
        assert!(
            matches!(&bad, Err(StoreError::Invalid { field, .. }) if field == "at"),
            "{b}: {bad:?}"
        );
        let no_offset = insert(&s, json!({"title": "x", "at": "2026-11-27T10:00:00"})).await;
        assert!(no_offset.is_err(), "{b}");
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_round_trips_any_value_and_filters_only_by_null() {
    for db in TestDb::each().await {
        let clock = Arc::new(ManualClock::at_micros(T0));
        let s = open(&db, &clock).await;
        let b = db.backend();
        let values = [
            json!({"a": [1, 2.5, {"b": null}], "c": "ü"}),
            json!([1, "two", false]),
            json!("text"),
            json!(42),
            json!(true),
        ];
        for (i, v) in values.iter().enumerate() {
            let r = insert(&s, json!({"title": format!("v{i}"), "data": v}))
                .await
                .unwrap();
            let got = s
                .entity("Event")
                .unwrap()
                .get(&AccessContext::system(), r["id"].as_str().unwrap())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(&got["data"], v, "{b}");
        }
        insert(&s, json!({"title": "null", "data": null}))
            .await
            .unwrap();
        let null = Filter::cmp("data", FilterOp::IsNull, json!(true));
        assert_eq!(titles(&s, Some(null), vec![]).await, ["null"], "{b}");
        let eq = Filter::cmp("data", FilterOp::Eq, json!(42));
        let q = ListQuery {
            filter: Some(eq),
            ..Default::default()
        };
        let refused = s
            .entity("Event")
            .unwrap()
            .list(&AccessContext::system(), &q)
            .await;
        assert!(matches!(refused, Err(StoreError::Invalid { .. })), "{b}");
        let nul = insert(&s, json!({"title": "nul", "data": {"k": "a\u{0}b"}})).await;
        assert!(
            matches!(&nul, Err(StoreError::Invalid { field, .. }) if field == "data"),
            "{b}"
        );
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updated_at_moves_on_update_and_created_at_does_not() {
    for db in TestDb::each().await {
        let clock = Arc::new(ManualClock::at_micros(T0));
        let s = open(&db, &clock).await;
        let b = db.backend();
        let e = s.entity("Event").unwrap();
        let ctx = AccessContext::system();
        let r = insert(&s, json!({"title": "a"})).await.unwrap();
        let id = r["id"].as_str().unwrap().to_string();
        assert_eq!(r["createdAt"], "2026-11-27T16:00:00.000000Z", "{b}");
        assert_eq!(r["updatedAt"], "2026-11-27T16:00:00.000000Z", "{b}");
        clock.advance_micros(1_500_000);
        let u = e
            .update(&ctx, &id, row(json!({"title": "b"})))
            .await
            .unwrap();
        assert_eq!(u["createdAt"], "2026-11-27T16:00:00.000000Z", "{b}");
        assert_eq!(u["updatedAt"], "2026-11-27T16:00:01.500000Z", "{b}");
        clock.advance_micros(1);
        let p = e
            .replace(&ctx, &id, row(json!({"title": "c"})))
            .await
            .unwrap();
        assert_eq!(p["createdAt"], "2026-11-27T16:00:00.000000Z", "{b}");
        assert_eq!(p["updatedAt"], "2026-11-27T16:00:01.500001Z", "{b}");
        let stored = e.get(&ctx, &id).await.unwrap().unwrap();
        assert_eq!(stored["createdAt"], p["createdAt"], "{b}");
        assert_eq!(stored["updatedAt"], p["updatedAt"], "{b}");
        // Only the server writes them.
        for (field, attempt) in [
            (
                "createdAt",
                e.update(&ctx, &id, row(json!({"createdAt": "2020-01-01T00:00:00Z"})))
                    .await,
            ),
            (
                "updatedAt",
                insert(
                    &s,
                    json!({"title": "x", "updatedAt": "2020-01-01T00:00:00Z"}),
                )
                .await,
            ),
        ] {
            assert!(
                matches!(&attempt, Err(StoreError::Invalid { field: f, .. }) if f == field),
                "{b}: {attempt:?}"
            );
        }
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_adding_created_at_stamps_existing_rows_with_its_time() {
    const V1: &str = "type Query { notes: [Note!]! } type Note { id: ID! body: String! }";
    const V2: &str = "type Query { notes: [Note!]! } type Note { id: ID! body: String! createdAt: DateTime! @createdAt seen: DateTime meta: JSON }";
    const V3: &str = "type Query { notes: [Note!]! } type Note { id: ID! body: String! createdAt: DateTime! @createdAt seen: DateTime meta: JSON due: DateTime! }";
    for db in TestDb::each().await {
        let b = db.backend();
        let s = db.open(V1).await;
        let r = s
            .entity("Note")
            .unwrap()
            .insert(&AccessContext::system(), row(json!({"body": "old"})))
            .await
            .unwrap();
        s.close().await;
        let clock = Arc::new(ManualClock::at_micros(T0));
        let opts = StoreOptions {
            clock: clock.clone(),
            ..Default::default()
        };
        let s = db.open_with(V2, opts.clone()).await.unwrap();
        let got = s
            .entity("Note")
            .unwrap()
            .get(&AccessContext::system(), r["id"].as_str().unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got["createdAt"], "2026-11-27T16:00:00.000000Z", "{b}");
        assert_eq!(got["seen"], Value::Null, "{b}");
        assert_eq!(got["meta"], Value::Null, "{b}");
        s.close().await;
        // A required DateTime the server does not set has no value to give.
        let refused = db.open_with(V3, opts).await;
        match refused {
            Err(e @ StoreError::DestructiveMigration { .. }) => {
                assert!(e.to_string().contains("due"), "{b}: {e}");
            }
            Err(other) => panic!("{b}: {other:?}"),
            Ok(_) => panic!("{b}: a required DateTime was added to a table with rows"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_insensitive_operators_fold_unicode_alike_on_every_backend() {
    for db in TestDb::each().await {
        let clock = Arc::new(ManualClock::at_micros(T0));
        let s = open(&db, &clock).await;
        let b = db.backend();
        for t in [
            "ÉCOLE normale",
            "petite école",
            "İstanbul",
            "Straße",
            "ΣΟΦΙΑ",
            "100% _sure\\",
        ] {
            insert(&s, json!({"title": t})).await.unwrap();
        }
        let find = |op: FilterOp, v: &str| Filter::cmp("title", op, json!(v));
        let order = || vec![OrderBy::asc("title")];
        assert_eq!(
            titles(&s, Some(find(FilterOp::IContains, "école")), order()).await,
            ["petite école", "ÉCOLE normale"],
            "{b}"
        );
        assert_eq!(
            titles(&s, Some(find(FilterOp::IStartsWith, "éCOLE")), order()).await,
            ["ÉCOLE normale"],
            "{b}"
        );
        assert_eq!(
            titles(&s, Some(find(FilterOp::IEndsWith, "ÉCOLE")), order()).await,
            ["petite école"],
            "{b}"
        );
        assert_eq!(
            titles(&s, Some(find(FilterOp::IEq, "STRASSE")), order()).await,
            Vec::<String>::new(),
            "{b}: ß does not expand to ss"
        );
        assert_eq!(
            titles(&s, Some(find(FilterOp::IEq, "straße")), order()).await,
            ["Straße"],
            "{b}"
        );
        assert_eq!(
            titles(&s, Some(find(FilterOp::IStartsWith, "istanbul")), order()).await,
            ["İstanbul"],
            "{b}: İ folds to i"
        );
        assert_eq!(
            titles(&s, Some(find(FilterOp::IEq, "σοφια")), order()).await,
            ["ΣΟΦΙΑ"],
            "{b}"
        );
        // Wildcards of LIKE are plain characters.
        assert_eq!(
            titles(&s, Some(find(FilterOp::IContains, "% _S")), order()).await,
            ["100% _sure\\"],
            "{b}"
        );
        assert_eq!(
            titles(&s, Some(find(FilterOp::IEndsWith, "RE\\")), order()).await,
            ["100% _sure\\"],
            "{b}"
        );
        assert!(
            titles(&s, Some(find(FilterOp::IContains, "%")), order())
                .await
                .len()
                == 1,
            "{b}"
        );
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_insensitive_filters_keep_row_policies_and_field_scopes() {
    const POLICY_SDL: &str = r#"
type Query { notes: [Note!]! }
type Note @policy(read: {owner: "$sub"}) {
  id: ID!
  owner: String
  title: String!
  secret: String @auth(read: "secret")
}
"#;
    let caller =
        |sub: &str, scopes: &[&str]| crate::common::caller_with(scopes, json!({ "sub": sub }));
    for db in TestDb::each().await {
        let b = db.backend();
        let s = db.open(POLICY_SDL).await;
        let e = s.entity("Note").unwrap();
        for (owner, title) in [("alice", "École A"), ("bob", "ÉCOLE B")] {
            e.insert(
                &AccessContext::system(),
                row(json!({"owner": owner, "title": title, "secret": "Clé"})),
            )
            .await
            .unwrap();
        }
        let list = |f: Filter| ListQuery {
            filter: Some(f),
            ..Default::default()
        };
        let alice = caller("alice", &["read"]);
        let page = e
            .list(
                &alice,
                &list(Filter::cmp("title", FilterOp::IContains, json!("école"))),
            )
            .await
            .unwrap();
        let got: Vec<_> = page
            .rows
            .into_rows()
            .iter()
            .map(|r| r["title"].clone())
            .collect();
        assert_eq!(got, [json!("École A")], "{b}: only the caller's rows");
        let count = e
            .count(
                &alice,
                Some(&Filter::cmp("title", FilterOp::IEq, json!("école b"))),
            )
            .await
            .unwrap();
        assert_eq!(count, 0, "{b}: bob's row is not counted");
        // A field the caller cannot read cannot be probed case-insensitively either.
        let probe = e
            .list(
                &alice,
                &list(Filter::cmp("secret", FilterOp::IContains, json!("clé"))),
            )
            .await;
        assert!(
            matches!(probe, Err(StoreError::Forbidden { .. })),
            "{b}: {probe:?}"
        );
        let allowed = caller("alice", &["read", "secret"]);
        let page = e
            .list(
                &allowed,
                &list(Filter::cmp("secret", FilterOp::IStartsWith, json!("CLÉ"))),
            )
            .await
            .unwrap();
        assert_eq!(page.rows.rows.len(), 1, "{b}");
        s.close().await;
    }
}

/// A clock that moves a microsecond at every reading, as a real one does
/// between two readings of one write.
#[derive(Debug)]
struct Ticking(std::sync::atomic::AtomicI64);

impl gatehouse_store::Clock for Ticking {
    fn now_micros(&self) -> i64 {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    }
}

/// One clock reading per write: a new row's `createdAt` and `updatedAt`
/// are equal (so `updatedAt > createdAt` means a later write changed it),
/// and so are the times of every row one transaction writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_write_has_one_time() {
    const NESTED: &str = r#"
type Query { events: [Event!]! }
type Event {
  id: ID!
  title: String!
  notes: [Note!]!
  createdAt: DateTime! @createdAt
  updatedAt: DateTime! @updatedAt
}
type Note {
  id: ID!
  event: Event!
  createdAt: DateTime! @createdAt
  updatedAt: DateTime! @updatedAt
}
"#;
    for db in TestDb::each().await {
        let b = db.backend();
        let s = db
            .open_with(
                NESTED,
                StoreOptions {
                    clock: Arc::new(Ticking(std::sync::atomic::AtomicI64::new(T0))),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let ctx = AccessContext::system();
        let e = s.entity("Event").unwrap();
        let r = e
            .insert(&ctx, row(json!({"title": "a", "notes": [{}, {}]})))
            .await
            .unwrap();
        assert_eq!(r["createdAt"], r["updatedAt"], "{b}: {r:?}");
        for n in r["notes"].as_array().unwrap() {
            assert_eq!(n["createdAt"], r["createdAt"], "{b}: {r:?}");
            assert_eq!(n["updatedAt"], r["createdAt"], "{b}: {r:?}");
        }
        let id = r["id"].as_str().unwrap();
        let stored = e.get(&ctx, id).await.unwrap().unwrap();
        assert_eq!(stored["createdAt"], stored["updatedAt"], "{b}");
        // One transaction of several writes: one time.
        let txn = s.begin_write();
        let te = txn.entity("Event").unwrap();
        let x = te.insert(&ctx, row(json!({"title": "x"}))).await.unwrap();
        let y = te.insert(&ctx, row(json!({"title": "y"}))).await.unwrap();
        txn.commit().await.unwrap();
        assert_eq!(x["createdAt"], y["createdAt"], "{b}");
        assert_eq!(x["updatedAt"], y["updatedAt"], "{b}");
        // A later write: later than the creation.
        let u = e
            .update(&ctx, id, row(json!({"title": "b"})))
            .await
            .unwrap();
        assert!(
            u["updatedAt"].as_str().unwrap() > u["createdAt"].as_str().unwrap(),
            "{b}: {u:?}"
        );
        s.close().await;
    }
}
