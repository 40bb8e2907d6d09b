//! The example's reading groups: tenancy kept in rows. A user belongs to
//! any number of groups and sees exactly theirs; a member cannot make
//! themselves an owner; a new group and its first owner are one request.

use serde_json::{Value, json};

use gatehouse_testkit::{password_token, repo_root};

use crate::serve;

async fn gql(c: &reqwest::Client, base: &str, token: &str, q: &str, v: Value) -> Value {
    gatehouse_testkit::graphql(c, &format!("{base}/graphql"), Some(token), q, v).await
}

fn names(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|g| g["name"].as_str().unwrap().to_string())
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn the_examples_reading_groups_keep_membership_in_rows() {
    let root = repo_root();
    let data = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", data.path().join("library.db").display());
    let server = serve(
        &root,
        &[
            "--config",
            "examples/library/gatehouse.toml",
            "--listen",
            "127.0.0.1:0",
        ],
        &[
            ("GATEHOUSE_DATABASE", db.as_str()),
            ("GATEHOUSE_SECRET", "groups-test-key-secret-0123"),
        ],
    );
    let (c, base) = (reqwest::Client::new(), server.base.clone());
    let app = ("demo-app", "demo-secret-change-me");
    let token = |user: &'static str, password: &'static str| {
        let (c, base) = (c.clone(), base.clone());
        async move {
            password_token(&c, &base, app, (user, password), Some("read write")).await["access_token"]
                .as_str()
                .unwrap()
                .to_string()
        }
    };
    let alice = token("alice", "alice-password").await;
    let bob = token("bob", "bob-password").await;
    let groups = "{ readingGroups { name members { user role } } }";

    // Each sees the two groups they belong to, and no other.
    let r = gql(&c, &base, &alice, groups, json!({})).await;
    assert_eq!(
        names(&r["data"]["readingGroups"]),
        ["Night owls", "SF readers"],
        "{r}"
    );
    let r = gql(&c, &base, &bob, groups, json!({})).await;
    assert_eq!(
        names(&r["data"]["readingGroups"]),
        ["Poetry circle", "SF readers"],
        "{r}"
    );

    // bob, a member of "SF readers", cannot make himself its owner, nor
    // join a group he is not in.
    let add = "mutation($g: ID!, $u: String!, $r: GroupRole) { addGroupMember(group: $g, user: $u, role: $r) { id } }";
    let r = gql(
        &c,
        &base,
        &bob,
        add,
        json!({"g": "sf-readers", "u": "bob", "r": "OWNER"}),
    )
    .await;
    assert_eq!(r["errors"][0]["extensions"]["code"], "FORBIDDEN", "{r}");
    let r = gql(&c, &base, &bob, add, json!({"g": "night-owls", "u": "bob"})).await;
    assert!(r["errors"][0]["extensions"]["code"].is_string(), "{r}");
    let r = gql(&c, &base, &bob, groups, json!({})).await;
    assert_eq!(
        names(&r["data"]["readingGroups"]),
        ["Poetry circle", "SF readers"],
        "{r}"
    );

    // alice, the owner, adds bob to "Night owls": he sees it now.
    let r = gql(
        &c,
        &base,
        &alice,
        add,
        json!({"g": "night-owls", "u": "bob"}),
    )
    .await;
    assert!(r.get("errors").is_none(), "{r}");
    let r = gql(&c, &base, &bob, groups, json!({})).await;
    assert_eq!(
        names(&r["data"]["readingGroups"]),
        ["Night owls", "Poetry circle", "SF readers"],
        "{r}"
    );

    // A new group and its first owner in one request.
    let r = gql(
        &c,
        &base,
        &bob,
        "mutation { createReadingGroup(input: {name: \"Book swap\", members: [{user: \"bob\", role: OWNER}]}) { name createdBy members { user role } } }",
        json!({}),
    )
    .await;
    assert_eq!(
        r["data"]["createReadingGroup"],
        json!({"name": "Book swap", "createdBy": "bob", "members": [{"user": "bob", "role": "OWNER"}]}),
        "{r}"
    );
    let r = gql(&c, &base, &alice, groups, json!({})).await;
    assert_eq!(
        names(&r["data"]["readingGroups"]),
        ["Night owls", "SF readers"],
        "{r}"
    );

    // A group's list: its members see it, others do not.
    let r = gql(
        &c,
        &base,
        &bob,
        "mutation { addGroupBook(group: \"poetry\", book: \"earthsea\") { id } }",
        json!({}),
    )
    .await;
    assert!(r.get("errors").is_none(), "{r}");
    let books = "{ groupBooks { group { name } book { title } } }";
    let r = gql(&c, &base, &bob, books, json!({})).await;
    assert_eq!(r["data"]["groupBooks"].as_array().unwrap().len(), 1, "{r}");
    let r = gql(&c, &base, &alice, books, json!({})).await;
    assert_eq!(r["data"]["groupBooks"], json!([]), "{r}");
    drop(server);
}
