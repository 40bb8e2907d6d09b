//! Row policies and field scopes (`docs/design/policies.md`): the same cases
//! through GraphQL, REST, SSE subscriptions and HTTP Basic, on each backend.
//! The fixture: `Memo` (published or own rows; own rows written; `admin`
//! bypasses; `draft` needs `memo:draft`), `Remark` (readable where its memo
//! is: a rule through a to-one path) and `Invoice` (a tenant claim, `org`).
//! Users: `alice` (org acme, may read drafts), `bob` (org globex), `admin`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::{APP, Server};

const CREATE: &str = "mutation($t: String!, $p: Boolean!, $o: String, $d: String) \
    { createMemo(title: $t, published: $p, owner: $o, draft: $d) { id owner } }";

/// Memos made by alice and bob: (alice open, alice private, bob private).
async fn memos(s: &Server, alice: &str, bob: &str) -> (String, String, String) {
    let mk = |t: &str, title: &str, published: bool| {
        let t = t.to_string();
        let title = title.to_string();
        // Only alice may write drafts.
        let vars = if t == alice {
            json!({"t": title, "p": published, "d": "secret draft"})
        } else {
            json!({"t": title, "p": published})
        };
        async move {
            let d = s.data(&t, CREATE, vars).await;
            d["createMemo"]["id"].as_str().unwrap().to_string()
        }
    };
    let a_open = mk(alice, "a-open", true).await;
    let a_private = mk(alice, "a-private", false).await;
    let b_private = mk(bob, "b-private", false).await;
    (a_open, a_private, b_private)
}

fn titles(v: &Value) -> Vec<&str> {
    let mut t: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["title"].as_str().unwrap())
        .collect();
    t.sort_unstable();
    t
}

fn code(r: &Value) -> &str {
    r["errors"][0]["extensions"]["code"].as_str().unwrap_or("")
}

#[tokio::test]
async fn owner_only_rows_on_every_entry_point() {
    for s in Server::each_backend("").await {
        let b = s.backend();
        let alice = s.token("alice").await;
        let bob = s.token("bob").await;
        let admin = s.token("admin").await;
        let (a_open, a_private, b_private) = memos(&s, &alice, &bob).await;

        // Owner injection: the owner is the creator's `sub`, not given.
        let d = s.data(&alice, "{ memos { id owner } }", json!({})).await;
        let owners: Vec<&str> = d["memos"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["id"] == a_private.as_str())
            .map(|m| m["owner"].as_str().unwrap())
            .collect();
        assert_eq!(owners.len(), 1, "{b}: {d}");
        let alice_sub = owners[0].to_string();
        assert!(!alice_sub.is_empty());

        // Lists: published rows and one's own.
        let d = s.data(&bob, "{ memos { title } }", json!({})).await;
        assert_eq!(titles(&d["memos"]), ["a-open", "b-private"], "{b}");
        let d = s.data(&alice, "{ memos { title } }", json!({})).await;
        assert_eq!(titles(&d["memos"]), ["a-open", "a-private"], "{b}");
        // Bypass scope.
        let d = s.data(&admin, "{ memos { title } }", json!({})).await;
        assert_eq!(titles(&d["memos"]).len(), 3, "{b}");
        // Paging is never short: the first page holds the caller's rows.
        let d = s
            .data(&bob, "{ memos(first: 1) { title } }", json!({}))
            .await;
        assert_eq!(d["memos"].as_array().unwrap().len(), 1, "{b}");
        let d = s
            .data(&bob, "{ memos(first: 1, offset: 1) { title } }", json!({}))
            .await;
        assert_eq!(d["memos"].as_array().unwrap().len(), 1, "{b}");

        // Lookups: null in GraphQL, 404 in REST.
        let d = s
            .data(
                &bob,
                "query($i: ID!) { memo(id: $i) { title } }",
                json!({"i": a_private}),
            )
            .await;
        assert_eq!(d["memo"], Value::Null, "{b}");
        let (st, _) = s
            .rest("GET", &format!("/v1/memos/{a_private}"), Some(&bob), None)
            .await;
        assert_eq!(st, 404, "{b}");
        let (st, body) = s
            .rest("GET", &format!("/v1/memos/{a_open}"), Some(&bob), None)
            .await;
        assert_eq!(st, 200, "{b}: {body}");

        // Counts: X-Total-Count is what the caller can see.
        let r = s
            .request("GET", "/v1/memos", Some(&bob))
            .send()
            .await
            .unwrap();
        assert_eq!(r.headers()["x-total-count"], "2", "{b}");
        let r = s
            .request("GET", "/v1/memos?per_page=1", Some(&alice))
            .send()
            .await
            .unwrap();
        assert_eq!(r.headers()["x-total-count"], "2", "{b}");
        let rows: Value = r.json().await.unwrap();
        assert_eq!(rows.as_array().unwrap().len(), 1, "{b}");
        let r = s
            .request("GET", "/v1/memos", Some(&admin))
            .send()
            .await
            .unwrap();
        assert_eq!(r.headers()["x-total-count"], "3", "{b}");

        // Forged owner: refused, nothing written.
        let r = s
            .gql(
                Some(&bob),
                CREATE,
                json!({"t": "forged", "p": false, "o": alice_sub}),
            )
            .await;
        assert_eq!(code(&r), "FORBIDDEN", "{b}: {r}");
        let (st, _) = s
            .rest(
                "POST",
                "/v1/memos",
                Some(&bob),
                Some(json!({"title": "forged", "published": false, "owner": alice_sub})),
            )
            .await;
        assert_eq!(st, 403, "{b}");
        let d = s.data(&admin, "{ memos { title } }", json!({})).await;
        assert_eq!(
            titles(&d["memos"]).len(),
            3,
            "{b}: nothing forged was written"
        );

        // Update and delete: invisible 404, visible but not own 403.
        let upd = "mutation($i: ID!, $p: MemoPatch!) { updateMemo(id: $i, patch: $p) { title } }";
        let r = s
            .gql(
                Some(&bob),
                upd,
                json!({"i": a_private, "p": {"title": "x"}}),
            )
            .await;
        assert_eq!(code(&r), "NOT_FOUND", "{b}: {r}");
        let r = s
            .gql(Some(&bob), upd, json!({"i": a_open, "p": {"title": "x"}}))
            .await;
        assert_eq!(code(&r), "FORBIDDEN", "{b}: {r}");
        let (st, _) = s
            .rest(
                "PATCH",
                &format!("/v1/memos/{a_private}"),
                Some(&bob),
                Some(json!({"title": "x"})),
            )
            .await;
        assert_eq!(st, 404, "{b}");
        let (st, _) = s
            .rest(
                "PATCH",
                &format!("/v1/memos/{a_open}"),
                Some(&bob),
                Some(json!({"title": "x"})),
            )
            .await;
        assert_eq!(st, 403, "{b}");
        let (st, _) = s
            .rest(
                "DELETE",
                &format!("/v1/memos/{a_private}"),
                Some(&bob),
                None,
            )
            .await;
        assert_eq!(st, 404, "{b}");
        let (st, _) = s
            .rest("DELETE", &format!("/v1/memos/{a_open}"), Some(&bob), None)
            .await;
        assert_eq!(st, 403, "{b}");
        let r = s
            .gql(
                Some(&bob),
                "mutation($i: ID!) { deleteMemo(id: $i) { id } }",
                json!({"i": a_private}),
            )
            .await;
        assert_eq!(code(&r), "NOT_FOUND", "{b}: {r}");
        // An update that would leave the policy (give the row away).
        let r = s
            .gql(
                Some(&alice),
                upd,
                json!({"i": a_private, "p": {"owner": "someone"}}),
            )
            .await;
        assert_eq!(code(&r), "FORBIDDEN", "{b}: {r}");
        let (st, _) = s
            .rest(
                "PUT",
                &format!("/v1/memos/{a_private}"),
                Some(&alice),
                Some(json!({"title": "t", "published": false, "owner": "someone"})),
            )
            .await;
        assert_eq!(st, 403, "{b}");
        // The owner's own change works.
        let d = s
            .data(&alice, upd, json!({"i": a_private, "p": {"title": "mine"}}))
            .await;
        assert_eq!(d["updateMemo"]["title"], "mine", "{b}");
        let d = s.data(&admin, "{ memos { title owner } }", json!({})).await;
        assert!(
            d["memos"]
                .as_array()
                .unwrap()
                .iter()
                .all(|m| m["owner"] != "someone"),
            "{b}: {d}"
        );
        // Bob's own delete works.
        let (st, _) = s
            .rest(
                "DELETE",
                &format!("/v1/memos/{b_private}"),
                Some(&bob),
                None,
            )
            .await;
        assert_eq!(st, 204, "{b}");

        // HTTP Basic callers are filtered the same way.
        let r = s
            .request("GET", "/v1/memos", None)
            .basic_auth("bob", Some("bob-password"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{b}");
        assert_eq!(r.headers()["x-total-count"], "1", "{b}");
    }
}

#[tokio::test]
async fn relations_and_paths_follow_the_policy() {
    for s in Server::each_backend("").await {
        let b = s.backend();
        let alice = s.token("alice").await;
        let bob = s.token("bob").await;
        let (a_open, a_private, _) = memos(&s, &alice, &bob).await;
        let add = "mutation($m: ID!, $t: String!) { createRemark(memo: $m, body: $t) { id } }";
        s.data(&alice, add, json!({"m": a_open, "t": "on open"}))
            .await;
        s.data(&alice, add, json!({"m": a_private, "t": "on private"}))
            .await;

        // A reference to a row the caller may not read is refused as if
        // the row did not exist, and nothing is written.
        let r = s
            .gql(Some(&bob), add, json!({"m": a_private, "t": "sneaky"}))
            .await;
        assert_eq!(code(&r), "BAD_USER_INPUT", "{b}: {r}");
        let missing = s
            .gql(Some(&bob), add, json!({"m": "no-such-memo", "t": "x"}))
            .await;
        assert_eq!(
            r["errors"][0]["message"]
                .as_str()
                .unwrap()
                .replace(&a_private, "ID"),
            missing["errors"][0]["message"]
                .as_str()
                .unwrap()
                .replace("no-such-memo", "ID"),
            "{b}"
        );
        // A rule through a to-one path.
        let d = s
            .data(&bob, "{ remarks { body memo { title } } }", json!({}))
            .await;
        assert_eq!(
            d["remarks"],
            json!([{"body": "on open", "memo": {"title": "a-open"}}]),
            "{b}"
        );
        let d = s.data(&alice, "{ remarks { body } }", json!({})).await;
        assert_eq!(d["remarks"].as_array().unwrap().len(), 2, "{b}");
        // The to-many side.
        let d = s
            .data(&alice, "{ memos { title remarks { body } } }", json!({}))
            .await;
        let n: usize = d["memos"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["remarks"].as_array().unwrap().len())
            .sum();
        assert_eq!(n, 2, "{b}: {d}");
        // Nested REST paths: an invisible parent is 404.
        let (st, _) = s
            .rest(
                "GET",
                &format!("/v1/memos/{a_private}/remarks"),
                Some(&bob),
                None,
            )
            .await;
        assert_eq!(st, 404, "{b}");
        let (st, body) = s
            .rest(
                "GET",
                &format!("/v1/memos/{a_open}/remarks"),
                Some(&bob),
                None,
            )
            .await;
        assert_eq!((st, body.as_array().map(Vec::len)), (200, Some(1)), "{b}");
        let r = s
            .request("GET", "/v1/remarks", Some(&bob))
            .send()
            .await
            .unwrap();
        assert_eq!(r.headers()["x-total-count"], "1", "{b}");
    }
}

#[tokio::test]
async fn tenant_claims_and_client_credentials() {
    for s in Server::each_backend("").await {
        let b = s.backend();
        let alice = s.token("alice").await;
        let bob = s.token("bob").await;
        let create =
            "mutation($t: Float!, $o: String) { createInvoice(total: $t, org: $o) { id org } }";
        // The tenant column is filled from the claim.
        let d = s.data(&alice, create, json!({"t": 10.0})).await;
        assert_eq!(d["createInvoice"]["org"], "acme", "{b}");
        let d = s.data(&bob, create, json!({"t": 20.0})).await;
        assert_eq!(d["createInvoice"]["org"], "globex", "{b}");
        // Over REST too, the required tenant field may be left out.
        let (st, body) = s
            .rest(
                "POST",
                "/v1/invoices",
                Some(&alice),
                Some(json!({"total": 5.0})),
            )
            .await;
        assert_eq!((st, &body["org"]), (201, &json!("acme")), "{b}: {body}");
        let (st, _) = s
            .rest(
                "DELETE",
                &format!("/v1/invoices/{}", body["id"].as_str().unwrap()),
                Some(&alice),
                None,
            )
            .await;
        assert_eq!(st, 204, "{b}");
        // Another tenant's id is refused.
        let r = s
            .gql(Some(&bob), create, json!({"t": 1.0, "o": "acme"}))
            .await;
        assert_eq!(code(&r), "FORBIDDEN", "{b}: {r}");
        let d = s
            .data(&alice, "{ invoices { org total } }", json!({}))
            .await;
        assert_eq!(
            d["invoices"],
            json!([{"org": "acme", "total": 10.0}]),
            "{b}"
        );
        let r = s
            .request("GET", "/v1/invoices", Some(&bob))
            .send()
            .await
            .unwrap();
        assert_eq!(r.headers()["x-total-count"], "1", "{b}");

        // A client_credentials token: `sub` is the client, no `org`, so no
        // invoice matches (a missing claim matches nothing) and it cannot
        // create one.
        let cc = s.client_token(APP).await;
        let d = s.data(&cc, "{ invoices { org } }", json!({})).await;
        assert_eq!(d["invoices"], json!([]), "{b}");
        let r = s
            .gql(Some(&cc), create, json!({"t": 1.0, "o": "acme"}))
            .await;
        assert_eq!(code(&r), "FORBIDDEN", "{b}: {r}");
        // `$sub` is a user's: a client acting for itself owns no memo
        // (`docs/design/authentication.md`), so it cannot create one.
        let r = s
            .gql(Some(&cc), CREATE, json!({"t": "by client", "p": false}))
            .await;
        assert_eq!(code(&r), "FORBIDDEN", "{b}: {r}");
    }
}

#[tokio::test]
async fn field_scopes_hide_values_filters_and_orderings() {
    for s in Server::each_backend("").await {
        let b = s.backend();
        let alice = s.token("alice").await;
        let bob = s.token("bob").await;
        let (a_open, _, _) = memos(&s, &alice, &bob).await;
        // Alice holds `memo:draft`.
        let d = s.data(&alice, "{ memos { title draft } }", json!({})).await;
        assert!(d["memos"][0]["draft"].is_string(), "{b}: {d}");
        // Bob: null and FORBIDDEN at the field's path.
        let r = s
            .gql(Some(&bob), "{ memos { title draft } }", json!({}))
            .await;
        assert_eq!(code(&r), "FORBIDDEN", "{b}: {r}");
        assert_eq!(r["data"]["memos"][0]["draft"], Value::Null, "{b}: {r}");
        assert_eq!(r["errors"][0]["path"][2], "draft", "{b}: {r}");
        // No filtering or ordering by it.
        let r = s
            .gql(
                Some(&bob),
                "{ memos(where: {draft: \"secret draft\"}) { title } }",
                json!({}),
            )
            .await;
        assert_eq!(code(&r), "FORBIDDEN", "{b}: {r}");
        let r = s
            .gql(
                Some(&bob),
                "{ memos(orderBy: [draft_ASC]) { title } }",
                json!({}),
            )
            .await;
        assert_eq!(code(&r), "FORBIDDEN", "{b}: {r}");
        // REST: left out of bodies, refused in filters, sort and writes.
        let (st, body) = s
            .rest("GET", &format!("/v1/memos/{a_open}"), Some(&bob), None)
            .await;
        assert_eq!(st, 200, "{b}");
        assert!(body.get("draft").is_none(), "{b}: {body}");
        let (_, body) = s
            .rest("GET", &format!("/v1/memos/{a_open}"), Some(&alice), None)
            .await;
        assert!(body.get("draft").is_some(), "{b}: {body}");
        // Each query string is asked by alice first: a list request
        // parsed and kept for her is checked again for bob.
        for path in [
            "/v1/memos?draft=x",
            "/v1/memos?sort=draft",
            "/v1/memos?fields=draft",
        ] {
            let (st, body) = s.rest("GET", path, Some(&alice), None).await;
            assert_eq!(st, 200, "{b}: {path}: {body}");
            let (st, _) = s.rest("GET", path, Some(&bob), None).await;
            assert_eq!(st, 403, "{b}: {path}");
        }
        let (st, _) = s
            .rest(
                "POST",
                "/v1/memos",
                Some(&bob),
                Some(json!({"title": "t", "published": true, "draft": "x"})),
            )
            .await;
        assert_eq!(st, 403, "{b}");
        let r = s
            .gql(Some(&bob), CREATE, json!({"t": "t", "p": true, "d": "x"}))
            .await;
        assert_eq!(code(&r), "FORBIDDEN", "{b}: {r}");
    }
}

/// One SSE stream, read in the background: its text so far. Reading stops
/// when it is dropped.
struct Sse {
    text: std::sync::Arc<std::sync::Mutex<String>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Sse {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Sse {
    async fn open(s: &Server, token: &str, query: &str) -> Sse {
        let mut r = s
            .client
            .post(format!("{}/graphql", s.base))
            .bearer_auth(token)
            .header("accept", "text/event-stream")
            .json(&json!({"query": query}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = text.clone();
        let task = tokio::spawn(async move {
            while let Ok(Some(chunk)) = r.chunk().await {
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&chunk));
            }
        });
        Sse { text, task }
    }

    fn text(&self) -> String {
        self.text.lock().unwrap().clone()
    }

    /// Waits until the stream has carried `needle`.
    async fn until(&self, needle: &str) {
        let what = format!("an event with {needle:?} (so far: {:?})", self.text());
        gatehouse_testkit::eventually(&what, || self.text().contains(needle)).await;
    }
}

#[tokio::test]
async fn subscription_events_reach_only_readers_of_the_row() {
    for s in Server::each_backend("").await {
        let b = s.backend();
        let alice = s.token("alice").await;
        let bob = s.token("bob").await;
        let q = "subscription { memoCreated { title } }";
        let to_bob = Sse::open(&s, &bob, q).await;
        let to_alice = Sse::open(&s, &alice, q).await;
        // Published probes, which both may read, until each stream has had
        // one: both listen from then on.
        let mut probes = 0;
        while !(to_bob.text().contains("probe") && to_alice.text().contains("probe")) {
            assert!(probes < 200, "{b}: the streams never listened");
            let vars = json!({"t": format!("probe-{probes}"), "p": true, "d": "x"});
            s.data(&alice, CREATE, vars).await;
            probes += 1;
            let _ = tokio::time::timeout(Duration::from_millis(50), async {
                to_bob.until("probe").await;
                to_alice.until("probe").await;
            })
            .await;
        }
        memos(&s, &alice, &bob).await;
        // A last event both may read: everything before it has arrived.
        s.data(&bob, CREATE, json!({"t": "last", "p": true})).await;
        to_bob.until("last").await;
        to_alice.until("last").await;
        let (bob_saw, alice_saw) = (to_bob.text(), to_alice.text());
        assert!(bob_saw.contains("a-open"), "{b}: {bob_saw}");
        assert!(bob_saw.contains("b-private"), "{b}: {bob_saw}");
        assert!(!bob_saw.contains("a-private"), "{b}: {bob_saw}");
        assert!(alice_saw.contains("a-private"), "{b}: {alice_saw}");
        assert!(!alice_saw.contains("b-private"), "{b}: {alice_saw}");
    }
}

/// A count never counts a row the caller may not read, and cannot be used
/// to probe a field the caller may not read (CONTRACT §11, §13).
#[tokio::test]
async fn counts_do_not_leak_rows_hidden_by_policies() {
    for s in Server::each_backend("").await {
        let b = s.backend();
        let alice = s.token("alice").await;
        let bob = s.token("bob").await;
        let admin = s.token("admin").await;
        memos(&s, &alice, &bob).await;
        for (who, token, want) in [("bob", &bob, 2), ("alice", &alice, 2), ("admin", &admin, 3)] {
            let d = s
                .data(token, "{ memos { id } memosCount }", json!({}))
                .await;
            assert_eq!(d["memosCount"], json!(want), "{b}: {who}");
            assert_eq!(
                d["memos"].as_array().map(Vec::len),
                Some(want),
                "{b}: {who}"
            );
            let d = s
                .data(
                    token,
                    "{ memosCount(where: {published: false}) }",
                    json!({}),
                )
                .await;
            assert_eq!(d["memosCount"], json!(want - 1), "{b}: {who}");
        }
        // Filtering on a field bob may not read is refused, not answered.
        let r = s
            .gql(
                Some(&bob),
                "{ memosCount(where: {draft: \"secret draft\"}) }",
                json!({}),
            )
            .await;
        assert_eq!(code(&r), "FORBIDDEN", "{b}: {r}");
        let d = s
            .data(
                &alice,
                "{ memosCount(where: {draft: \"secret draft\"}) }",
                json!({}),
            )
            .await;
        assert_eq!(d["memosCount"], json!(2), "{b}");
    }
}

const VENTURE: &str = "mutation($o: String, $n: String!, $c: String, $s: Int) \
    { createVenture(org: $o, name: $n, code: $c, stage: $s) { id org } }";

/// A unique key never answers for a row the caller may not see: a create
/// outside the create policy, an update that would leave the update
/// policy and a nested create are refused the same way whether or not
/// another org holds the values (CONTRACT §11), on GraphQL and REST.
#[tokio::test]
async fn unique_keys_do_not_answer_for_other_tenants() {
    for s in Server::each_backend("").await {
        let b = s.backend();
        let alice = s.token("alice").await;
        let bob = s.token("bob").await;
        let vars = json!({"n": "Secret Merger", "c": "SM-1", "s": 1});
        s.data(&alice, VENTURE, vars).await;
        // Into acme, as bob: the taken name and a free one alike.
        for name in ["Secret Merger", "Nothing Here"] {
            let r = s
                .gql(Some(&bob), VENTURE, json!({"o": "acme", "n": name}))
                .await;
            assert_eq!(code(&r), "FORBIDDEN", "{b}: {name}: {r}");
            let (st, body) = s
                .rest(
                    "POST",
                    "/v1/ventures",
                    Some(&bob),
                    Some(json!({"org": "acme", "name": name})),
                )
                .await;
            assert_eq!(st, 403, "{b}: {name}: {body}");
        }
        // Nested in a new portfolio: the same.
        let nested = "mutation($n: String!) { createPortfolio(title: \"p\", \
            ventures: [{org: \"acme\", name: $n}]) { id } }";
        for name in ["Secret Merger", "Nothing Here"] {
            let r = s.gql(Some(&bob), nested, json!({"n": name})).await;
            assert_eq!(code(&r), "FORBIDDEN", "{b}: {name}: {r}");
        }
        // An update that would leave the policy (stage 5 and up), with
        // acme's code and with a free one.
        let d = s.data(&bob, VENTURE, json!({"n": "Own", "s": 1})).await;
        let id = d["createVenture"]["id"].as_str().unwrap().to_string();
        let update = "mutation($id: ID!, $c: String) \
            { updateVenture(id: $id, patch: {code: $c, stage: 9}) { id } }";
        for c in ["SM-1", "FREE-1"] {
            let r = s.gql(Some(&bob), update, json!({"id": id, "c": c})).await;
            assert_eq!(code(&r), "FORBIDDEN", "{b}: {c}: {r}");
            let (st, body) = s
                .rest(
                    "PATCH",
                    &format!("/v1/ventures/{id}"),
                    Some(&bob),
                    Some(json!({"code": c, "stage": 9})),
                )
                .await;
            assert_eq!(st, 403, "{b}: {c}: {body}");
        }
        // Acme's venture is as it was, and none was added to acme.
        let d = s
            .data(&alice, "{ ventures { name code } }", json!({}))
            .await;
        assert_eq!(
            d["ventures"],
            json!([{"name": "Secret Merger", "code": "SM-1"}]),
            "{b}"
        );
    }
}

/// A delete refused because rows still refer to it names them only when
/// the caller may read one (CONTRACT §11): bob's folder holds alice's
/// attachment, which bob cannot see.
#[tokio::test]
async fn restricted_deletes_do_not_name_hidden_rows() {
    for s in Server::each_backend("").await {
        let b = s.backend();
        let alice = s.token("alice").await;
        let bob = s.token("bob").await;
        let folder = "mutation($n: String!) { createFolder(name: $n) { id } }";
        let attach = "mutation($f: ID!) { createAttachment(folder: $f, name: \"plan\") { id } }";
        let delete = "mutation($id: ID!) { deleteFolder(id: $id) { id } }";
        let d = s.data(&bob, folder, json!({"n": "bob's"})).await;
        let f = d["createFolder"]["id"].as_str().unwrap().to_string();
        s.data(&alice, attach, json!({"f": f})).await;
        let r = s.gql(Some(&bob), delete, json!({"id": f})).await;
        assert_eq!(code(&r), "CONFLICT", "{b}: {r}");
        let message = r["errors"][0]["message"].as_str().unwrap();
        assert!(!message.contains("Attachment"), "{b}: {message}");
        assert!(!message.contains("`folder`"), "{b}: {message}");
        let (st, body) = s
            .rest("DELETE", &format!("/v1/folders/{f}"), Some(&bob), None)
            .await;
        assert_eq!(st, 409, "{b}: {body}");
        assert!(!body.to_string().contains("Attachment"), "{b}: {body}");
        // Alice, who may read the attachment, is told what holds it.
        let r = s.gql(Some(&alice), delete, json!({"id": f})).await;
        assert_eq!(code(&r), "CONFLICT", "{b}: {r}");
        let message = r["errors"][0]["message"].as_str().unwrap();
        assert!(
            message.contains("Attachment rows still reference it through `folder`"),
            "{b}: {message}"
        );
    }
}

/// A create that fails for want of a claim names the claim.
#[tokio::test]
async fn a_missing_claim_is_named() {
    for s in Server::each_backend("").await {
        let b = s.backend();
        // `power` may read and write but has no `org` claim.
        let writer = s.token("power").await;
        let r = s
            .gql(Some(&writer), VENTURE, json!({"n": "claimless"}))
            .await;
        let message = r["errors"][0]["message"].as_str().unwrap_or("");
        assert!(message.contains("`$org`"), "{b}: {r}");
        assert!(message.contains("no `org` claim"), "{b}: {r}");
        let (st, body) = s
            .rest(
                "POST",
                "/v1/ventures",
                Some(&writer),
                Some(json!({"name": "claimless"})),
            )
            .await;
        assert!(body.to_string().contains("`$org`"), "{b}: {st} {body}");
    }
}

/// Nested children through a declared input bind by field name and are
/// created under their own create policy: the tenant is filled from the
/// claim, another tenant's is refused and nothing is written (CONTRACT
/// §11, §13).
#[tokio::test]
async fn nested_children_through_a_declared_input() {
    for s in Server::each_backend("").await {
        let b = s.backend();
        let alice = s.token("alice").await;
        let add = "mutation($v: [PortfolioVentureInput!]) { addPortfolio(input: \
            {title: \"p\", ventures: $v}) { title ventures { name org } } }";
        let d = s
            .data(
                &alice,
                add,
                json!({"v": [{"name": "N1"}, {"name": "N2", "code": "C2"}]}),
            )
            .await;
        let mut names: Vec<(String, String)> = d["addPortfolio"]["ventures"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| (v["name"].to_string(), v["org"].to_string()))
            .collect();
        names.sort();
        assert_eq!(
            names,
            vec![
                ("\"N1\"".to_string(), "\"acme\"".to_string()),
                ("\"N2\"".to_string(), "\"acme\"".to_string())
            ],
            "{b}: {d}"
        );
        let r = s
            .gql(
                Some(&alice),
                add,
                json!({"v": [{"name": "N3"}, {"name": "N4", "org": "globex"}]}),
            )
            .await;
        assert_eq!(code(&r), "FORBIDDEN", "{b}: {r}");
        let d = s.data(&alice, "{ ventures { name } }", json!({})).await;
        assert_eq!(d["ventures"].as_array().unwrap().len(), 2, "{b}: {d}");
    }
}

/// A non-null to-one whose row a policy hides from the caller has no value
/// to give: it fails with `FORBIDDEN` at its own path and its null goes up
/// to the nearest nullable parent (GraphQL spec §6.4.4), in lookups, lists
/// and connections alike; never an internal error, never a node silently
/// missing the field.
#[tokio::test]
async fn a_hidden_non_null_to_one_is_forbidden_at_its_path() {
    for s in Server::each_backend("").await {
        let b = s.backend();
        let alice = s.token("alice").await;
        let bob = s.token("bob").await;
        let board = s
            .data(
                &alice,
                "mutation { createBoard(name: \"alice's\") { id } }",
                json!({}),
            )
            .await["createBoard"]["id"]
            .clone();
        let pin = s
            .data(
                &alice,
                "mutation($b: ID!) { createPin(label: \"p\", board: $b) { id } }",
                json!({"b": board}),
            )
            .await["createPin"]["id"]
            .clone();
        // The board's owner reads it whole.
        let d = s
            .data(&alice, "{ pins { label board { name } } }", json!({}))
            .await;
        assert_eq!(
            d["pins"],
            json!([{"label": "p", "board": {"name": "alice's"}}]),
            "{b}"
        );
        let forbidden_at = |r: &Value, path: Value| {
            let errors = r["errors"].as_array().unwrap_or_else(|| panic!("{b}: {r}"));
            assert_eq!(errors.len(), 1, "{b}: {r}");
            assert_eq!(code(r), "FORBIDDEN", "{b}: {r}");
            assert_eq!(errors[0]["path"], path, "{b}: {r}");
        };
        // A lookup: the nullable `pin` is null.
        let r = s
            .gql(
                Some(&bob),
                "query($id: ID!) { pin(id: $id) { label board { name } } }",
                json!({"id": pin}),
            )
            .await;
        assert_eq!(r["data"], json!({"pin": null}), "{b}: {r}");
        forbidden_at(&r, json!(["pin", "board"]));
        // A list whose every level is non-null: the null reaches `data`.
        let r = s
            .gql(Some(&bob), "{ pins { label board { name } } }", json!({}))
            .await;
        assert_eq!(r["data"], Value::Null, "{b}: {r}");
        forbidden_at(&r, json!(["pins", 0, "board"]));
        // A connection: up to the nullable connection field.
        let r = s
            .gql(
                Some(&bob),
                "{ pinsConnection { edges { node { label board { name } } } } }",
                json!({}),
            )
            .await;
        assert_eq!(r["data"], json!({"pinsConnection": null}), "{b}: {r}");
        forbidden_at(&r, json!(["pinsConnection", "edges", 0, "node", "board"]));
        // What the reader may read, it reads.
        let d = s.data(&bob, "{ pins { label } }", json!({})).await;
        assert_eq!(d["pins"], json!([{"label": "p"}]), "{b}");
    }
}
