//! `DateTime`, `JSON`, server-set times and the case-insensitive operators
//! through GraphQL (both executors) and REST, on every backend.

use std::sync::Arc;

use gatehouse_graphql::Graphql;
use gatehouse_graphql::async_graphql::{Request, Variables};
use gatehouse_store::{ManualClock, Store, StoreOptions};
use gatehouse_testkit::{TestDb, model};
use reqwest::StatusCode;
use serde_json::{Value, json};

const SDL: &str = r#"
type Query {
  events(title_icontains: String, title_ieq: String, at_gt: DateTime, where: EventWhere, orderBy: [EventOrderBy!]): [Event!]!
}
type Mutation {
  createEvent(input: EventCreate!): Event!
  updateEvent(id: ID!, input: EventPatch!): Event!
}
input EventCreate { title: String! at: DateTime data: JSON }
input EventPatch { title: String at: DateTime data: JSON }
input EventWhere { title_istarts_with: String title_iends_with: String data_is_null: Boolean at_lt: DateTime }
enum EventOrderBy { at_ASC at_DESC title_ASC }
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

struct Served {
    base: String,
    client: reqwest::Client,
    graphql: Graphql,
    clock: Arc<ManualClock>,
    _store: Store,
    _db: TestDb,
}

async fn serve(db: TestDb) -> Served {
    let m = model(SDL);
    let clock = Arc::new(ManualClock::at_micros(T0));
    let store = db
        .open_with(
            &m,
            StoreOptions {
                clock: clock.clone(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let (served, graphql) = crate::serve_graphql_and_rest(&store, m).await;
    Served {
        base: served.base,
        client: served.client,
        graphql,
        clock,
        _store: store,
        _db: db,
    }
}

impl Served {
    async fn gql(&self, query: &str, variables: Value) -> Value {
        let url = format!("{}/graphql", self.base);
        gatehouse_testkit::graphql(&self.client, &url, None, query, variables).await
    }

    async fn data(&self, query: &str, variables: Value) -> Value {
        let r = self.gql(query, variables).await;
        assert!(r.get("errors").is_none(), "unexpected errors: {r}");
        r["data"].clone()
    }

    /// The planned executor's answer, which must equal async-graphql's.
    async fn planned(&self, query: &str, variables: Value) -> Value {
        let req = || Request::new(query).variables(Variables::from_json(variables.clone()));
        let slow = self.graphql.execute(req()).await;
        let slow = serde_json::to_value(&slow.response).unwrap();
        let fast = self
            .graphql
            .execute_planned(&req())
            .await
            .unwrap_or_else(|| panic!("{query}: the planned executor declined it"));
        let fast: Value = serde_json::from_slice(&fast).unwrap();
        assert_eq!(fast, slow, "{query}");
        fast
    }

    async fn rest(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut r = self.client.request(method, format!("{}{path}", self.base));
        if let Some(b) = body {
            r = r.json(&b);
        }
        let r = r.send().await.unwrap();
        let status = r.status();
        let text = r.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datetime_json_and_server_times_over_graphql() {
    for db in TestDb::each().await {
        let b = db.backend();
        let s = serve(db).await;
        let create = "mutation($i: EventCreate!) { createEvent(input: $i) { id title at data createdAt updatedAt } }";
        let e = s
            .data(create, json!({"i": {"title": "India", "at": "2026-11-27T10:00:00+05:30", "data": {"k": [1, "x", null]}}}))
            .await["createEvent"]
            .clone();
        assert_eq!(e["at"], "2026-11-27T04:30:00.000000Z", "{b}");
        assert_eq!(e["data"], json!({"k": [1, "x", null]}), "{b}");
        assert_eq!(e["createdAt"], "2026-11-27T16:00:00.000000Z", "{b}");
        // An object literal in the query text is a JSON value too.
        let lit = s
            .data(
                r#"mutation { createEvent(input: {title: "utc", at: "2026-11-27T09:00:00Z", data: {a: 1, b: [true]}}) { data } }"#,
                json!({}),
            )
            .await;
        assert_eq!(
            lit["createEvent"]["data"],
            json!({"a": 1, "b": [true]}),
            "{b}"
        );
        s.clock.advance_micros(2_000_000);
        let u = s
            .data(
                "mutation($id: ID!) { updateEvent(id: $id, input: {title: \"India!\"}) { createdAt updatedAt } }",
                json!({"id": e["id"]}),
            )
            .await;
        assert_eq!(
            u["updateEvent"]["createdAt"], "2026-11-27T16:00:00.000000Z",
            "{b}"
        );
        assert_eq!(
            u["updateEvent"]["updatedAt"], "2026-11-27T16:00:02.000000Z",
            "{b}"
        );
        // Ordered by instant: 04:30Z before 09:00Z, whatever the local text said.
        let q = "{ events(orderBy: [at_ASC]) { title at } }";
        let ordered = s.planned(q, json!({})).await;
        assert_eq!(
            ordered["data"]["events"],
            json!([{"title": "India!", "at": "2026-11-27T04:30:00.000000Z"}, {"title": "utc", "at": "2026-11-27T09:00:00.000000Z"}]),
            "{b}"
        );
        let q = "query($t: DateTime) { events(at_gt: $t) { title } }";
        let later = s
            .planned(q, json!({"t": "2026-11-27T12:00:00+05:30"}))
            .await;
        assert_eq!(later["data"]["events"], json!([{"title": "utc"}]), "{b}");
        // Invalid DateTime.
        let bad = s
            .gql(create, json!({"i": {"title": "x", "at": "27/11/2026"}}))
            .await;
        // Refused before execution, as an invalid `Date` is, naming the field.
        assert_eq!(bad["data"], Value::Null, "{b}: {bad}");
        let message = bad["errors"][0]["message"].as_str().unwrap();
        assert!(
            message.contains("input.at") && message.contains("DateTime"),
            "{b}: {bad}"
        );
        let bad = s
            .gql("{ events(at_gt: \"tomorrow\") { id } }", json!({}))
            .await;
        assert!(bad["errors"][0]["message"].is_string(), "{b}: {bad}");
        // The server-set fields are not in the inputs.
        let set = s
            .gql(
                "mutation { createEvent(input: {title: \"x\", createdAt: \"2020-01-01T00:00:00Z\"}) { id } }",
                json!({}),
            )
            .await;
        assert!(
            set["errors"][0]["message"]
                .as_str()
                .unwrap()
                .contains("createdAt"),
            "{b}: {set}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_insensitive_search_over_graphql_and_rest() {
    for db in TestDb::each().await {
        let b = db.backend();
        let s = serve(db).await;
        for t in ["ÉCOLE normale", "petite école", "Bug report", "Straße"] {
            s.data(
                "mutation($t: String!) { createEvent(input: {title: $t}) { id } }",
                json!({"t": t}),
            )
            .await;
        }
        let q = "query($t: String) { events(title_icontains: $t, orderBy: [title_ASC]) { title } }";
        let got = s.planned(q, json!({"t": "école"})).await;
        assert_eq!(
            got["data"]["events"],
            json!([{"title": "petite école"}, {"title": "ÉCOLE normale"}]),
            "{b}"
        );
        let got = s
            .data("{ events(title_ieq: \"bug REPORT\") { title } }", json!({}))
            .await;
        assert_eq!(got["events"], json!([{"title": "Bug report"}]), "{b}");
        let q = "query($w: EventWhere) { events(where: $w) { title } }";
        let got = s
            .planned(q, json!({"w": {"title_istarts_with": "STRA"}}))
            .await;
        assert_eq!(got["data"]["events"], json!([{"title": "Straße"}]), "{b}");
        let got = s
            .planned(q, json!({"w": {"title_iends_with": "ÉCOLE"}}))
            .await;
        assert_eq!(
            got["data"]["events"],
            json!([{"title": "petite école"}]),
            "{b}"
        );
        // REST: the same operators as query parameters.
        let (status, body) = s
            .rest(
                reqwest::Method::GET,
                "/v1/events?title_icontains=%C3%89COLE&sort=title",
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{b}: {body}");
        let titles: Vec<_> = body
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["title"].clone())
            .collect();
        assert_eq!(
            titles,
            [json!("petite école"), json!("ÉCOLE normale")],
            "{b}"
        );
        let (status, _) = s
            .rest(reqwest::Method::GET, "/v1/events?id_icontains=x", None)
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{b}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_reads_and_writes_the_new_scalars_and_refuses_server_set_fields() {
    for db in TestDb::each().await {
        let b = db.backend();
        let s = serve(db).await;
        let (status, created) = s
            .rest(
                reqwest::Method::POST,
                "/v1/events",
                Some(json!({"title": "a", "at": "2026-11-27T10:00:00-03:00", "data": [1, {"x": "y"}]})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{b}: {created}");
        assert_eq!(created["at"], "2026-11-27T13:00:00.000000Z", "{b}");
        assert_eq!(created["data"], json!([1, {"x": "y"}]), "{b}");
        assert_eq!(created["createdAt"], "2026-11-27T16:00:00.000000Z", "{b}");
        let id = created["id"].as_str().unwrap();
        // A body naming a server-set field is refused, naming it.
        let (status, problem) = s
            .rest(
                reqwest::Method::POST,
                "/v1/events",
                Some(json!({"title": "b", "createdAt": "2020-01-01T00:00:00Z"})),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{b}: {problem}");
        assert!(problem.to_string().contains("createdAt"), "{b}: {problem}");
        // PUT does not need them, and keeps createdAt.
        s.clock.advance_micros(5);
        let (status, put) = s
            .rest(
                reqwest::Method::PUT,
                &format!("/v1/events/{id}"),
                Some(json!({"title": "c"})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{b}: {put}");
        assert_eq!(put["createdAt"], "2026-11-27T16:00:00.000000Z", "{b}");
        assert_eq!(put["updatedAt"], "2026-11-27T16:00:00.000005Z", "{b}");
        assert_eq!(put["at"], Value::Null, "{b}");
        // An invalid DateTime in a body names the field; in a filter it is a 400.
        let (status, problem) = s
            .rest(
                reqwest::Method::POST,
                "/v1/events",
                Some(json!({"title": "d", "at": "2026-13-01T00:00:00Z"})),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{b}: {problem}");
        assert!(problem.to_string().contains("\"at\""), "{b}: {problem}");
        let (status, _) = s
            .rest(reqwest::Method::GET, "/v1/events?at_gt=yesterday", None)
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{b}");
        let (status, list) = s
            .rest(reqwest::Method::GET, "/v1/events?data_is_null=true", None)
            .await;
        assert_eq!(status, StatusCode::OK, "{b}");
        assert_eq!(list.as_array().unwrap().len(), 1, "{b}: {list}");
        let (status, _) = s
            .rest(reqwest::Method::GET, "/v1/events?data=1", None)
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{b}");
        let (status, _) = s
            .rest(reqwest::Method::GET, "/v1/events?sort=data", None)
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{b}");
        // The OpenAPI document: date-time, read-only server times.
        let (_, doc) = s.rest(reqwest::Method::GET, "/v1/openapi.json", None).await;
        let text = doc.to_string();
        assert!(text.contains("\"format\":\"date-time\""), "{b}");
        assert!(text.contains("\"readOnly\":true"), "{b}");
    }
}
