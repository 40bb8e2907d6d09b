//! Owner fields are write-once (CONTRACT §11): with a tenant-wide update
//! rule and an owner-only delete rule (`Task` in `schema/owners.graphql`),
//! a member who may edit every task must not rewrite `createdBy` and then
//! delete another member's task, through GraphQL or REST. Also: a bypass
//! caller's create is filled from its claims, and a to-one reference to a
//! row the caller may not read is null in REST bodies, as in GraphQL.

use serde_json::{Value, json};

use crate::Server;

const CREATE: &str = "mutation($i: TaskInput!) { createTask(input: $i) { id createdBy } }";
const UPDATE: &str =
    "mutation($id: ID!, $i: TaskUpdate!) { updateTask(id: $id, input: $i) { id title createdBy } }";
const DELETE: &str = "mutation($id: ID!) { deleteTask(id: $id) { id } }";

fn code(r: &Value) -> &str {
    r["errors"][0]["extensions"]["code"].as_str().unwrap_or("")
}

/// (id, createdBy) of a task `token` creates.
async fn task(s: &Server, token: &str, input: Value) -> (String, String) {
    let d = s.data(token, CREATE, json!({ "i": input })).await;
    let t = &d["createTask"];
    (
        t["id"].as_str().unwrap().to_string(),
        t["createdBy"].as_str().unwrap_or_default().to_string(),
    )
}

#[tokio::test]
async fn a_member_cannot_take_over_a_task_to_delete_it() {
    for s in Server::each_backend("").await {
        let b = s.backend();
        let alice = s.token("alice").await;
        let bob = s.token("bob").await;
        let (t, alice_sub) = task(&s, &alice, json!({"title": "a"})).await;
        let (_, bob_sub) = task(&s, &bob, json!({"title": "b"})).await;
        assert!(!alice_sub.is_empty() && alice_sub != bob_sub, "{b}");
        let path = format!("/v1/tasks/{t}");

        // The rewrite is refused on every write path, and nothing is written.
        let r = s
            .gql(
                Some(&bob),
                UPDATE,
                json!({"id": t, "i": {"createdBy": bob_sub}}),
            )
            .await;
        assert_eq!(code(&r), "FORBIDDEN", "{b}: {r}");
        let r = s
            .gql(
                Some(&bob),
                UPDATE,
                json!({"id": t, "i": {"title": "mine now", "createdBy": null}}),
            )
            .await;
        assert_eq!(code(&r), "FORBIDDEN", "{b}: {r}");
        for (method, body) in [
            ("PATCH", json!({"createdBy": bob_sub})),
            ("PUT", json!({"title": "mine now", "createdBy": bob_sub})),
        ] {
            let (st, body) = s.rest(method, &path, Some(&bob), Some(body)).await;
            assert_eq!(st, 403, "{b} {method}: {body}");
        }
        let (st, row) = s.rest("GET", &path, Some(&alice), None).await;
        assert_eq!(st, 200, "{b}");
        assert_eq!(row["createdBy"], json!(alice_sub), "{b}: {row}");
        assert_eq!(row["title"], "a", "{b}: {row}");

        // The delete of another member's task still fails.
        let r = s.gql(Some(&bob), DELETE, json!({"id": t})).await;
        assert_eq!(code(&r), "FORBIDDEN", "{b}: {r}");
        let (st, _) = s.rest("DELETE", &path, Some(&bob), None).await;
        assert_eq!(st, 403, "{b}");

        // Editing other fields works; repeating the owner (a whole
        // replacement) or leaving it out of a PUT keeps it.
        let d = s
            .data(&bob, UPDATE, json!({"id": t, "i": {"title": "edited"}}))
            .await;
        assert_eq!(d["updateTask"]["createdBy"], json!(alice_sub), "{b}");
        let (st, body) = s
            .rest(
                "PUT",
                &path,
                Some(&bob),
                Some(json!({"title": "put", "createdBy": alice_sub})),
            )
            .await;
        assert_eq!(st, 200, "{b}: {body}");
        let (st, body) = s
            .rest("PUT", &path, Some(&bob), Some(json!({"title": "put 2"})))
            .await;
        assert_eq!(st, 200, "{b}: {body}");
        assert_eq!(body["createdBy"], json!(alice_sub), "{b}: {body}");

        // The creator deletes it.
        let d = s.data(&alice, DELETE, json!({"id": t})).await;
        assert_eq!(d["deleteTask"]["id"], json!(t), "{b}");
    }
}

#[tokio::test]
async fn the_bypass_scope_fills_and_may_change_owners() {
    for s in Server::each_backend("").await {
        let b = s.backend();
        let power = s.token("power").await; // holds `review`, the bypass scope
        let alice = s.token("alice").await;
        let (t, owner) = task(&s, &power, json!({"title": "p"})).await;
        assert!(!owner.is_empty(), "{b}: a bypass create is filled too");
        let (_, kept) = task(&s, &power, json!({"title": "q", "createdBy": "carol"})).await;
        assert_eq!(kept, "carol", "{b}: a value it gives is kept");
        let (_, alice_sub) = task(&s, &alice, json!({"title": "a"})).await;
        let d = s
            .data(
                &power,
                UPDATE,
                json!({"id": t, "i": {"createdBy": alice_sub}}),
            )
            .await;
        assert_eq!(d["updateTask"]["createdBy"], json!(alice_sub), "{b}");
        let d = s.data(&alice, DELETE, json!({"id": t})).await;
        assert_eq!(d["deleteTask"]["id"], json!(t), "{b}");
    }
}

#[tokio::test]
async fn rest_bodies_hide_references_to_unseen_rows() {
    for s in Server::each_backend("").await {
        let b = s.backend();
        let alice = s.token("alice").await;
        let bob = s.token("bob").await;
        let d = s
            .data(
                &alice,
                "mutation { createBoard(name: \"alice's\") { id } }",
                json!({}),
            )
            .await;
        let board = d["createBoard"]["id"].as_str().unwrap().to_string();
        let (t, _) = task(&s, &alice, json!({"title": "a", "board": board})).await;
        let one = format!("/v1/tasks/{t}");

        // The owner of the board sees the reference.
        let (_, row) = s.rest("GET", &one, Some(&alice), None).await;
        assert_eq!(row["board"], json!(board), "{b}: {row}");

        // Bob may read the task but not the board: null everywhere.
        let pick = |list: &Value| -> Value {
            list.as_array()
                .unwrap()
                .iter()
                .find(|r| r["id"] == json!(t))
                .cloned()
                .unwrap_or(Value::Null)
        };
        let (st, row) = s.rest("GET", &one, Some(&bob), None).await;
        assert_eq!((st, &row["board"]), (200, &Value::Null), "{b}: {row}");
        let (_, row) = s
            .rest("GET", &format!("{one}?fields=board"), Some(&bob), None)
            .await;
        assert_eq!(row["board"], Value::Null, "{b}: {row}");
        for q in ["", "?fields=board", "?fields=title,board&per_page=100"] {
            let (st, list) = s
                .rest("GET", &format!("/v1/tasks{q}"), Some(&bob), None)
                .await;
            assert_eq!(st, 200, "{b}");
            let row = pick(&list);
            assert_eq!(row["id"], json!(t), "{b} {q}: {list}");
            assert_eq!(row["board"], Value::Null, "{b} {q}: {list}");
        }
        let (st, row) = s
            .rest("PATCH", &one, Some(&bob), Some(json!({"title": "b"})))
            .await;
        assert_eq!((st, &row["board"]), (200, &Value::Null), "{b}: {row}");
        // Nested paths too, listing and creating.
        let (st, project) = s
            .rest(
                "POST",
                "/v1/projects",
                Some(&alice),
                Some(json!({"name": "p"})),
            )
            .await;
        assert_eq!(st, 201, "{b}: {project}");
        let nested = format!("/v1/projects/{}/tasks", project["id"].as_str().unwrap());
        let (st, row) = s
            .rest(
                "POST",
                &nested,
                Some(&alice),
                Some(json!({"title": "n", "board": board})),
            )
            .await;
        assert_eq!((st, &row["board"]), (201, &json!(board)), "{b}: {row}");
        for q in ["", "?fields=board"] {
            let (st, list) = s
                .rest("GET", &format!("{nested}{q}"), Some(&bob), None)
                .await;
            assert_eq!(st, 200, "{b}: {list}");
            let rows = list.as_array().unwrap();
            assert_eq!(rows.len(), 1, "{b}: {list}");
            assert_eq!(rows[0]["board"], Value::Null, "{b} {q}: {list}");
        }
        // GraphQL reads the same relation as null.
        let r = s
            .data(
                &bob,
                "query($id: ID!) { task(id: $id) { board { id } } }",
                json!({"id": t}),
            )
            .await;
        assert_eq!(r["task"]["board"], Value::Null, "{b}: {r}");
        let (_, row) = s.rest("GET", &one, Some(&alice), None).await;
        assert_eq!(row["board"], json!(board), "{b}: the reference is kept");
    }
}
