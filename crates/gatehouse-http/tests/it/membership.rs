//! Tenancy in rows over GraphQL, with the membership schema of CONTRACT §11
//! and the root types generated for it (a schema of types only): a user
//! creates an org and becomes its first owner in one request, sees the
//! projects of every org they belong to, and cannot make themselves the
//! owner of an org they are only a member of.

use gatehouse_auth::Principal;
use gatehouse_graphql::GraphqlOptions;
use gatehouse_graphql::async_graphql::{Request, Variables};
use gatehouse_testkit::{TestDb, model};
use serde_json::{Value, json};

use super::{Server, start_model, user};

const SDL: &str = r#"
enum Role { OWNER MEMBER }
type Org @policy(read: {members_some: {user: "$sub"}}, create: {createdBy: "$sub"},
                 update: {members_some: {user: "$sub", role: OWNER}}, delete: {createdBy: "$sub"}) {
  id: ID!
  name: String!
  createdBy: String!
  members: [Member!]!
  projects: [Project!]!
}
type Member @policy(read: {org: {members_some: {user: "$sub"}}},
                    write: {org: {OR: [{createdBy: "$sub"}, {members_some: {user: "$sub", role: OWNER}}]}}) {
  id: ID!
  org: Org!
  user: String!
  role: Role!
}
type Project @policy(all: {org: {members_some: {user: "$sub"}}}) {
  id: ID!
  org: Org!
  name: String!
}
"#;

async fn gql(s: &Server, who: &Principal, query: &str, variables: Value) -> Value {
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

fn member(sub: &str) -> Principal {
    user(sub, &["read", "write"])
}

/// `sub` creates an org with itself as first owner; its id.
async fn create_org(s: &Server, sub: &str, name: &str) -> String {
    let r = gql(
        s,
        &member(sub),
        "mutation($n: String!, $u: String!) { createOrg(input: {name: $n, members: [{user: $u, role: OWNER}]}) { id createdBy members { user role } } }",
        json!({"n": name, "u": sub}),
    )
    .await;
    assert!(r["errors"].is_null(), "{sub} creates {name}: {r}");
    let org = &r["data"]["createOrg"];
    assert_eq!(org["createdBy"], sub);
    assert_eq!(org["members"], json!([{"user": sub, "role": "OWNER"}]));
    org["id"].as_str().unwrap().to_string()
}

async fn add(s: &Server, by: &str, org: &str, who: &str, role: &str) -> Value {
    gql(
        s,
        &member(by),
        "mutation($o: ID!, $u: String!, $r: Role!) { createMember(input: {org: $o, user: $u, role: $r}) { id } }",
        json!({"o": org, "u": who, "r": role}),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_decides_who_reads_and_who_may_grant_ownership() {
    for db in TestDb::each().await {
        let backend = db.backend();
        let s = start_model(db, model(SDL), GraphqlOptions::default(), 1 << 20).await;
        let acme = create_org(&s, "alice", "acme").await;
        let globex = create_org(&s, "gina", "globex").await;
        let initech = create_org(&s, "ivan", "initech").await;
        for (by, org) in [("alice", &acme), ("gina", &globex)] {
            let r = add(&s, by, org, "bob", "MEMBER").await;
            assert!(r["errors"].is_null(), "{backend}: {r}");
        }
        for (by, org, name) in [
            ("alice", &acme, "rockets"),
            ("gina", &globex, "widgets"),
            ("ivan", &initech, "tps"),
        ] {
            let r = gql(
                &s,
                &member(by),
                "mutation($o: ID!, $n: String!) { createProject(input: {org: $o, name: $n}) { id } }",
                json!({"o": org, "n": name}),
            )
            .await;
            assert!(r["errors"].is_null(), "{r}");
        }
        // bob belongs to two orgs: he sees both orgs' projects, not the third's.
        let r = gql(
            &s,
            &member("bob"),
            "{ projects(orderBy: [name_ASC]) { name } projectsCount orgs(orderBy: [name_ASC]) { name } }",
            json!({}),
        )
        .await;
        assert_eq!(
            r["data"],
            json!({"projects": [{"name": "rockets"}, {"name": "widgets"}], "projectsCount": 2,
                   "orgs": [{"name": "acme"}, {"name": "globex"}]}),
            "{backend}: {r}"
        );
        // The generated `where` inputs filter through the membership too.
        let r = gql(
            &s,
            &member("bob"),
            r#"{ orgs(where: {members_some: {user: "alice", role: OWNER}}) { name } }"#,
            json!({}),
        )
        .await;
        assert_eq!(r["data"]["orgs"], json!([{"name": "acme"}]), "{r}");

        // A member cannot make himself an owner: not by a new row...
        let r = add(&s, "bob", &acme, "bob", "OWNER").await;
        assert_eq!(r["errors"][0]["extensions"]["code"], "FORBIDDEN", "{r}");
        // ...nor for an org he cannot see (a reference to a missing row).
        let r = add(&s, "bob", &initech, "bob", "OWNER").await;
        assert!(!r["errors"].is_null(), "{r}");
        assert_ne!(r["errors"][0]["extensions"]["code"], "FORBIDDEN", "{r}");
        // Nothing was written.
        let r = gql(
            &s,
            &member("alice"),
            "{ orgs { name members { user role } } }",
            json!({}),
        )
        .await;
        assert_eq!(
            r["data"]["orgs"],
            json!([{"name": "acme", "members": [{"user": "alice", "role": "OWNER"}, {"user": "bob", "role": "MEMBER"}]}]),
            "{r}"
        );
    }
}
