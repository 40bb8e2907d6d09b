//! Tenancy in rows over GraphQL, with the membership schema of
//! `docs/design/policies.md` ("Relation rules") and the root types
//! generated for it (a schema of types only): a user
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

async fn project(s: &Server, by: &str, org: &str, name: &str) -> String {
    let r = gql(
        s,
        &member(by),
        "mutation($o: ID!, $n: String!) { createProject(input: {org: $o, name: $n}) { id } }",
        json!({"o": org, "n": name}),
    )
    .await;
    assert!(r["errors"].is_null(), "{r}");
    r["data"]["createProject"]["id"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribers_get_the_events_of_their_orgs_only_on_every_kind() {
    use futures::StreamExt;
    for db in TestDb::each().await {
        let backend = db.backend();
        let s = start_model(db, model(SDL), GraphqlOptions::default(), 1 << 20).await;
        let acme = create_org(&s, "alice", "acme").await;
        let initech = create_org(&s, "ivan", "initech").await;
        let mal = create_org(&s, "mallory", "mal").await;
        let r = add(&s, "alice", &acme, "bob", "MEMBER").await;
        assert!(r["errors"].is_null(), "{r}");
        let mut kept = Vec::new();
        let orgs = [
            ("ivan", &initech, "i"),
            ("alice", &acme, "a"),
            ("mallory", &mal, "m"),
        ];
        for (by, org, name) in orgs {
            kept.push(project(&s, by, org, name).await);
        }
        // bob (in acme) and mallory (in mal) subscribe to every kind.
        let mut firsts = Vec::new();
        for who in ["bob", "mallory"] {
            for kind in ["projectCreated", "projectUpdated", "projectDeleted"] {
                let req =
                    Request::new(format!("subscription {{ {kind} {{ name }} }}")).data(member(who));
                let mut stream = Box::pin(s.graphql.execute_stream(req));
                firsts.push((who, kind, tokio::spawn(async move { stream.next().await })));
            }
        }
        gatehouse_testkit::listening(&s.store, firsts.len()).await;
        // Initech's events first, then acme's, then mal's: each subscriber's
        // first event of a kind is its own org's.
        for ((by, org, name), kept) in orgs.into_iter().zip(&kept) {
            let new = project(&s, by, org, &format!("{name}2")).await;
            let r = gql(
                &s,
                &member(by),
                "mutation($id: ID!, $n: String!) { updateProject(id: $id, input: {name: $n}) { id } }",
                json!({"id": kept, "n": format!("{name}!")}),
            )
            .await;
            assert!(r["errors"].is_null(), "{r}");
            let r = gql(
                &s,
                &member(by),
                "mutation($id: ID!) { deleteProject(id: $id) { id } }",
                json!({"id": new}),
            )
            .await;
            assert!(r["errors"].is_null(), "{r}");
        }
        for (who, kind, first) in firsts {
            let resp = tokio::time::timeout(std::time::Duration::from_secs(5), first)
                .await
                .unwrap_or_else(|_| panic!("{backend}: {who} got no {kind}"))
                .unwrap()
                .unwrap();
            let v = serde_json::to_value(&resp.response).unwrap();
            let org = if who == "bob" { "a" } else { "m" };
            let expected = match kind {
                "projectUpdated" => format!("{org}!"),
                _ => format!("{org}2"),
            };
            assert_eq!(
                v["data"][kind]["name"], expected,
                "{backend}: {who}'s first {kind}: {v}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_list_is_one_statement_from_either_executor() {
    for db in TestDb::each().await {
        let backend = db.backend();
        let s = start_model(db, model(SDL), GraphqlOptions::default(), 1 << 20).await;
        let acme = create_org(&s, "alice", "acme").await;
        let globex = create_org(&s, "gina", "globex").await;
        let initech = create_org(&s, "ivan", "initech").await;
        let r = add(&s, "gina", &globex, "alice", "MEMBER").await;
        assert!(r["errors"].is_null(), "{r}");
        for (by, org, name) in [
            ("alice", &acme, "a1"),
            ("gina", &globex, "g1"),
            ("ivan", &initech, "i1"),
            ("alice", &acme, "a2"),
        ] {
            project(&s, by, org, name).await;
        }
        let query = "{ projects(first: 10, orderBy: [name_ASC]) { name } }";
        let expected =
            json!({"data": {"projects": [{"name": "a1"}, {"name": "a2"}, {"name": "g1"}]}});
        let before = s.store.statements();
        let r = gql(&s, &member("alice"), query, json!({})).await;
        assert_eq!(r, expected, "{backend}");
        assert_eq!(s.store.statements() - before, 1, "{backend}: resolvers");

        let before = s.store.statements();
        let planned = s
            .graphql
            .execute_planned(&Request::new(query).data(member("alice")))
            .await
            .unwrap_or_else(|| {
                panic!("{backend}: the planned executor declined a membership list")
            });
        assert_eq!(
            serde_json::from_slice::<Value>(&planned).unwrap(),
            expected,
            "{backend}"
        );
        assert_eq!(s.store.statements() - before, 1, "{backend}: planned");
    }
}
