//! Upsert and bulk writes over GraphQL, on a tenant schema of types only
//! (the roots are generated): an upsert creates or updates by a unique
//! key under the create or update policy; `updateWidgets` and
//! `deleteWidgets` change every row that matches and that the caller may
//! change, in one transaction, leave alone the rows it may only read,
//! refuse the whole request for a change that would leave the policy or
//! touch an owner field, and refuse more rows than `max_bulk_rows`
//! before writing anything. Each changed row has its change event.

use std::sync::Arc;

use gatehouse_auth::Principal;
use gatehouse_graphql::async_graphql::{Request, Variables};
use gatehouse_graphql::{Graphql, GraphqlOptions};
use gatehouse_schema::Model;
use gatehouse_store::{AccessContext, Filter, Store, StoreOptions};
use gatehouse_testkit::{TestDb, model};
use serde_json::{Value, json};

/// Widgets of an org: everyone in it reads them; an unlocked one may be
/// changed and deleted by its org. `sku` is unique across orgs.
const SDL: &str = r#"
type Widget @policy(read: {org: "$org"}, create: {org: "$org"},
                    update: {org: "$org", locked: false}, delete: {org: "$org", locked: false}) {
  id: ID!
  org: String!
  sku: String! @unique
  name: String!
  locked: Boolean!
}
"#;

struct Served {
    graphql: Graphql,
    store: Store,
    _db: TestDb,
}

/// `SDL` over `db`, with at most `max_bulk_rows` rows per bulk write.
async fn serve(db: TestDb, max_bulk_rows: u32) -> Served {
    let m: Arc<Model> = model(SDL);
    let store = db
        .open_with(
            &m,
            StoreOptions {
                max_bulk_rows,
                ..StoreOptions::default()
            },
        )
        .await
        .expect("the store opens");
    let opts = GraphqlOptions {
        auth_required: false,
        ..GraphqlOptions::default()
    };
    let graphql = Graphql::new(m, store.clone(), &opts).unwrap();
    Served {
        graphql,
        store,
        _db: db,
    }
}

/// A user of `org` who may read and write.
fn of(sub: &str, org: &str) -> Principal {
    let mut p = crate::user(sub, &["read", "write"]);
    p.claims.insert("org".into(), json!(org));
    p
}

async fn gql(s: &Served, who: &Principal, query: &str, variables: Value) -> Value {
    let r = s
        .graphql
        .execute(
            Request::new(query)
                .variables(Variables::from_json(variables))
                .data(who.clone()),
        )
        .await;
    serde_json::to_value(&r.response).unwrap()
}

/// A widget of `org`, written by the system; its id.
async fn widget(s: &Served, org: &str, sku: &str, name: &str, locked: bool) -> String {
    let row = json!({"org": org, "sku": sku, "name": name, "locked": locked});
    let r = s
        .store
        .entity("Widget")
        .unwrap()
        .insert(&AccessContext::system(), row.as_object().unwrap().clone())
        .await
        .unwrap();
    r["id"].as_str().unwrap().to_string()
}

/// Every widget as `sku -> (org, name, locked)`, read by the system, sorted by sku.
async fn all(s: &Served) -> Vec<(String, String, String, bool)> {
    let rows = s
        .store
        .entity("Widget")
        .unwrap()
        .list(&AccessContext::system(), &Default::default())
        .await
        .unwrap()
        .rows
        .into_rows();
    let mut out: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r["sku"].as_str().unwrap().to_string(),
                r["org"].as_str().unwrap().to_string(),
                r["name"].as_str().unwrap().to_string(),
                r["locked"].as_bool().unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

fn code(r: &Value) -> &str {
    r["errors"][0]["extensions"]["code"].as_str().unwrap_or("")
}

const UPSERT: &str = "mutation($i: WidgetCreateInput!) { upsertWidget(input: $i, onConflict: [sku]) { id org sku name } }";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upsert_creates_a_row_then_updates_it_by_its_unique_key() {
    for db in TestDb::each().await {
        let b = db.backend();
        let s = serve(db, 1000).await;
        let ann = of("ann", "acme");
        let first = gql(
            &s,
            &ann,
            UPSERT,
            json!({"i": {"sku": "A1", "name": "first", "locked": false}}),
        )
        .await;
        assert!(first["errors"].is_null(), "{b}: {first}");
        // The owner field is filled from the claim, as a create fills it.
        assert_eq!(first["data"]["upsertWidget"]["org"], "acme", "{b}");
        let second = gql(
            &s,
            &ann,
            UPSERT,
            json!({"i": {"sku": "A1", "name": "second", "locked": false}}),
        )
        .await;
        assert!(second["errors"].is_null(), "{b}: {second}");
        assert_eq!(
            second["data"]["upsertWidget"]["id"], first["data"]["upsertWidget"]["id"],
            "{b}: the same row"
        );
        assert_eq!(
            all(&s).await,
            [("A1".into(), "acme".into(), "second".into(), false)],
            "{b}"
        );
        // Fields that are no unique key together are refused by the store;
        // a field of no key is not a value of the enum at all.
        let r = gql(
            &s,
            &ann,
            "mutation { upsertWidget(input: {sku: \"A1\", name: \"x\", locked: false}, onConflict: [id, sku]) { id } }",
            json!({}),
        )
        .await;
        assert_eq!(code(&r), "BAD_USER_INPUT", "{b}: {r}");
        assert!(
            r.to_string().contains("is not a unique key of Widget"),
            "{b}: {r}"
        );
        let r = gql(
            &s,
            &ann,
            "mutation { upsertWidget(input: {sku: \"A1\", name: \"x\", locked: false}, onConflict: [name]) { id } }",
            json!({}),
        )
        .await;
        assert!(!r["errors"].is_null(), "{b}: {r}");
        // The enum lists the id and the unique fields.
        let sdl = s.graphql.sdl();
        assert!(
            sdl.contains("enum WidgetUniqueField {\n\tid\n\tsku\n}"),
            "{b}: {sdl}"
        );
        assert_eq!(
            all(&s).await,
            [("A1".into(), "acme".into(), "second".into(), false)],
            "{b}"
        );
        s.store.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upsert_on_another_tenants_key_neither_updates_nor_reveals_more_than_a_create() {
    for db in TestDb::each().await {
        let b = db.backend();
        let s = serve(db, 1000).await;
        widget(&s, "acme", "A1", "ann's", false).await;
        let before = all(&s).await;
        let mallory = of("mallory", "mal");
        let input = json!({"sku": "A1", "name": "mine now", "locked": false});
        // The upsert answers what a create of the same row answers: the
        // key's conflict, as for any create (the row stays hidden).
        let upsert = gql(&s, &mallory, UPSERT, json!({"i": input})).await;
        let create = gql(
            &s,
            &mallory,
            "mutation($i: WidgetCreateInput!) { createWidget(input: $i) { id } }",
            json!({"i": input}),
        )
        .await;
        assert_eq!(code(&upsert), "CONFLICT", "{b}: {upsert}");
        assert_eq!(
            upsert["errors"][0]["message"], create["errors"][0]["message"],
            "{b}: {upsert} / {create}"
        );
        assert!(!upsert.to_string().contains("ann's"), "{b}: {upsert}");
        // Naming the other tenant outright: refused by the create policy,
        // in the same words whether or not the key is taken.
        let taken = gql(
            &s,
            &mallory,
            UPSERT,
            json!({"i": {"org": "acme", "sku": "A1", "name": "x", "locked": false}}),
        )
        .await;
        let free = gql(
            &s,
            &mallory,
            UPSERT,
            json!({"i": {"org": "acme", "sku": "Z9", "name": "x", "locked": false}}),
        )
        .await;
        assert_eq!(code(&taken), "FORBIDDEN", "{b}: {taken}");
        assert_eq!(
            taken["errors"][0]["message"], free["errors"][0]["message"],
            "{b}: {taken} / {free}"
        );
        assert_eq!(all(&s).await, before, "{b}: nothing changed");
        s.store.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upsert_of_a_row_the_caller_may_read_but_not_change_is_forbidden() {
    for db in TestDb::each().await {
        let b = db.backend();
        let s = serve(db, 1000).await;
        widget(&s, "acme", "L1", "locked", true).await;
        let before = all(&s).await;
        let r = gql(
            &s,
            &of("bob", "acme"),
            UPSERT,
            json!({"i": {"sku": "L1", "name": "changed", "locked": true}}),
        )
        .await;
        assert_eq!(code(&r), "FORBIDDEN", "{b}: {r}");
        assert_eq!(all(&s).await, before, "{b}");
        s.store.close().await;
    }
}

const UPDATE: &str = "mutation($w: WidgetWhere!, $s: WidgetUpdateInput!) { updateWidgets(where: $w, set: $s) { count rows { sku name } } }";
const DELETE: &str =
    "mutation($w: WidgetWhere!) { deleteWidgets(where: $w) { count rows { sku name } } }";

/// acme's `a1`, `a2` (unlocked) and `a3` (locked), mal's `m1`.
async fn four(s: &Served) {
    widget(s, "acme", "a1", "one", false).await;
    widget(s, "acme", "a2", "two", false).await;
    widget(s, "acme", "a3", "three", true).await;
    widget(s, "mal", "m1", "mal's", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_update_changes_the_rows_the_caller_may_change_and_leaves_the_rest_alone() {
    for db in TestDb::each().await {
        let b = db.backend();
        let s = serve(db, 1000).await;
        four(&s).await;
        // `where: {}` matches every row: of those, ann may change a1 and
        // a2; a3 (locked) she may only read, m1 she may not even see.
        let r = gql(
            &s,
            &of("ann", "acme"),
            UPDATE,
            json!({"w": {}, "s": {"name": "renamed"}}),
        )
        .await;
        assert!(r["errors"].is_null(), "{b}: {r}");
        assert_eq!(
            r["data"]["updateWidgets"],
            // Rows come in id order, which is creation order here.
            json!({"count": 2, "rows": [{"sku": "a1", "name": "renamed"}, {"sku": "a2", "name": "renamed"}]}),
            "{b}: {r}"
        );
        assert_eq!(
            all(&s).await,
            [
                ("a1".into(), "acme".into(), "renamed".into(), false),
                ("a2".into(), "acme".into(), "renamed".into(), false),
                ("a3".into(), "acme".into(), "three".into(), true),
                ("m1".into(), "mal".into(), "mal's".into(), false),
            ],
            "{b}"
        );
        // A filter that matches nothing the caller may change: zero rows.
        let r = gql(
            &s,
            &of("ann", "acme"),
            UPDATE,
            json!({"w": {"sku": "a3"}, "s": {"name": "x"}}),
        )
        .await;
        assert_eq!(
            r["data"]["updateWidgets"],
            json!({"count": 0, "rows": []}),
            "{b}: {r}"
        );
        s.store.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_update_that_would_take_a_row_out_of_its_policy_changes_nothing() {
    for db in TestDb::each().await {
        let b = db.backend();
        let s = serve(db, 1000).await;
        four(&s).await;
        let before = all(&s).await;
        // Locking the rows would leave the update policy (`locked: false`).
        let r = gql(
            &s,
            &of("ann", "acme"),
            UPDATE,
            json!({"w": {}, "s": {"name": "x", "locked": true}}),
        )
        .await;
        assert_eq!(code(&r), "FORBIDDEN", "{b}: {r}");
        assert!(r["data"].is_null(), "{b}: {r}");
        assert_eq!(all(&s).await, before, "{b}: nothing changed");
        s.store.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_update_of_an_owner_field_changes_nothing() {
    for db in TestDb::each().await {
        let b = db.backend();
        let s = serve(db, 1000).await;
        four(&s).await;
        let before = all(&s).await;
        // The generated update input has no owner field to set.
        let r = gql(
            &s,
            &of("ann", "acme"),
            UPDATE,
            json!({"w": {}, "s": {"org": "mal"}}),
        )
        .await;
        assert!(!r["errors"].is_null(), "{b}: {r}");
        // Nor does the store let anyone but a bypassing caller change one.
        let ann = AccessContext::caller(
            ["read", "write"].iter().map(|s| s.to_string()).collect(),
            json!({"sub": "ann", "org": "acme"})
                .as_object()
                .unwrap()
                .clone(),
            false,
        );
        let e = s
            .store
            .entity("Widget")
            .unwrap()
            .update_where(
                &ann,
                Some(&Filter::eq("sku", json!("a1"))),
                json!({"org": "mal"}).as_object().unwrap().clone(),
            )
            .await
            .unwrap_err();
        assert_eq!(e.code(), gatehouse_store::Code::Forbidden, "{b}: {e}");
        assert_eq!(all(&s).await, before, "{b}: nothing changed");
        s.store.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_write_over_the_limit_is_refused_before_anything_is_written() {
    for db in TestDb::each().await {
        let b = db.backend();
        // At most two rows per bulk write; ann may change three.
        let s = serve(db, 2).await;
        four(&s).await;
        widget(&s, "acme", "a4", "four", false).await;
        let before = all(&s).await;
        let ann = of("ann", "acme");
        let r = gql(&s, &ann, UPDATE, json!({"w": {}, "s": {"name": "x"}})).await;
        assert_eq!(code(&r), "BAD_USER_INPUT", "{b}: {r}");
        assert!(r.to_string().contains("max_bulk_rows"), "{b}: {r}");
        let r = gql(&s, &ann, DELETE, json!({"w": {}})).await;
        assert_eq!(code(&r), "BAD_USER_INPUT", "{b}: {r}");
        assert_eq!(all(&s).await, before, "{b}: nothing changed");
        // Rows the caller may only read do not count: two it may change
        // are within the limit.
        let r = gql(
            &s,
            &ann,
            UPDATE,
            json!({"w": {"sku_in": ["a1", "a2", "a3"]}, "s": {"name": "x"}}),
        )
        .await;
        assert_eq!(r["data"]["updateWidgets"]["count"], 2, "{b}: {r}");
        s.store.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_delete_deletes_the_rows_the_caller_may_delete_and_returns_them() {
    for db in TestDb::each().await {
        let b = db.backend();
        let s = serve(db, 1000).await;
        four(&s).await;
        let r = gql(&s, &of("ann", "acme"), DELETE, json!({"w": {}})).await;
        assert!(r["errors"].is_null(), "{b}: {r}");
        assert_eq!(
            r["data"]["deleteWidgets"],
            json!({"count": 2, "rows": [{"sku": "a1", "name": "one"}, {"sku": "a2", "name": "two"}]}),
            "{b}: {r}"
        );
        assert_eq!(
            all(&s).await,
            [
                ("a3".into(), "acme".into(), "three".into(), true),
                ("m1".into(), "mal".into(), "mal's".into(), false),
            ],
            "{b}"
        );
        s.store.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_field_after_a_bulk_write_rolls_the_bulk_write_back() {
    for db in TestDb::each().await {
        let b = db.backend();
        let s = serve(db, 1000).await;
        four(&s).await;
        let before = all(&s).await;
        // The second field takes a sku that is taken: the request fails
        // as a whole, and the bulk update before it is not applied.
        let r = gql(
            &s,
            &of("ann", "acme"),
            "mutation { updateWidgets(where: {}, set: {name: \"z\"}) { count } deleteWidgets(where: {sku: \"a2\"}) { count } createWidget(input: {sku: \"a1\", name: \"dup\", locked: false}) { id } }",
            json!({}),
        )
        .await;
        assert_eq!(code(&r), "CONFLICT", "{b}: {r}");
        assert!(r["data"].is_null(), "{b}: {r}");
        assert_eq!(all(&s).await, before, "{b}: nothing changed");
        s.store.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_get_an_event_for_every_row_a_bulk_write_changed() {
    use futures::StreamExt;
    for db in TestDb::each().await {
        let b = db.backend();
        let s = serve(db, 1000).await;
        four(&s).await;
        // bob (acme) gets every acme event; mallory (mal) none of them,
        // so her first event of each kind is the one of her own row last.
        let expected = |who: &str, kind: &str| -> Vec<&'static str> {
            match (who, kind) {
                ("bob", "widgetUpdated" | "widgetDeleted") => vec!["a1:u", "a2:u"],
                ("bob", _) => vec!["a9:nine"],
                (_, "widgetUpdated" | "widgetDeleted") => vec!["m2:marker!"],
                _ => vec!["m2:marker"],
            }
        };
        let mut streams = Vec::new();
        for who in [of("bob", "acme"), of("mallory", "mal")] {
            for kind in ["widgetUpdated", "widgetDeleted", "widgetCreated"] {
                let req = Request::new(format!("subscription {{ {kind} {{ sku name }} }}"))
                    .data(who.clone());
                let mut stream = Box::pin(s.graphql.execute_stream(req));
                let n = expected(&who.subject, kind).len();
                let task = tokio::spawn(async move {
                    let mut got = Vec::new();
                    for _ in 0..n {
                        let Some(resp) = stream.next().await else {
                            break;
                        };
                        let v = serde_json::to_value(&resp.response).unwrap();
                        let row = &v["data"][kind];
                        got.push(format!(
                            "{}:{}",
                            row["sku"].as_str().unwrap_or("?"),
                            row["name"].as_str().unwrap_or("?")
                        ));
                    }
                    got
                });
                streams.push((who.subject.clone(), kind, task));
            }
        }
        gatehouse_testkit::listening(&s.store, streams.len()).await;
        let ann = of("ann", "acme");
        let r = gql(&s, &ann, UPDATE, json!({"w": {}, "s": {"name": "u"}})).await;
        assert_eq!(r["data"]["updateWidgets"]["count"], 2, "{b}: {r}");
        let r = gql(&s, &ann, DELETE, json!({"w": {}})).await;
        assert_eq!(r["data"]["deleteWidgets"]["count"], 2, "{b}: {r}");
        // A refused upsert publishes nothing; a created row its event.
        let r = gql(
            &s,
            &ann,
            UPSERT,
            json!({"i": {"sku": "a3", "name": "x", "locked": true}}),
        )
        .await;
        assert_eq!(code(&r), "FORBIDDEN", "{b}: {r}");
        let r = gql(
            &s,
            &ann,
            UPSERT,
            json!({"i": {"sku": "a9", "name": "nine", "locked": false}}),
        )
        .await;
        assert!(r["errors"].is_null(), "{b}: {r}");
        let mallory = of("mallory", "mal");
        let r = gql(
            &s,
            &mallory,
            UPSERT,
            json!({"i": {"sku": "m2", "name": "marker", "locked": false}}),
        )
        .await;
        assert!(r["errors"].is_null(), "{b}: {r}");
        let r = gql(
            &s,
            &mallory,
            UPDATE,
            json!({"w": {"sku": "m2"}, "s": {"name": "marker!"}}),
        )
        .await;
        assert_eq!(r["data"]["updateWidgets"]["count"], 1, "{b}: {r}");
        let r = gql(&s, &mallory, DELETE, json!({"w": {"sku": "m2"}})).await;
        assert_eq!(r["data"]["deleteWidgets"]["count"], 1, "{b}: {r}");
        for (who, kind, task) in streams {
            let got = tokio::time::timeout(std::time::Duration::from_secs(5), task)
                .await
                .unwrap_or_else(|_| panic!("{b}: {who} is still waiting for {kind} events"))
                .unwrap();
            assert_eq!(got, expected(&who, kind), "{b}: {who}'s {kind}");
        }
        s.store.close().await;
    }
}
