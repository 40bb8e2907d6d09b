//! Tenancy in rows: policies that go through a membership table with
//! `members_some` (`docs/design/policies.md`, "Relation rules"). Inside a
//! rule the rows reached are read without their own policies, and the row
//! being created or updated never counts towards its own rule.

use gatehouse_store::{AccessContext, ListQuery, Row, Store, StoreError};
use gatehouse_testkit::TestDb;
use serde_json::json;

use crate::common::{caller_with, row};

pub const SDL: &str = r#"
type Query { orgs: [Org!]! members: [Member!]! projects: [Project!]! }
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

fn user(sub: &str) -> AccessContext {
    caller_with(&["read", "write"], json!({ "sub": sub }))
}

fn id(r: &Row) -> String {
    r["id"].as_str().unwrap().to_string()
}

/// `sub` creates an org and becomes its first owner in one request.
async fn org(s: &Store, sub: &str, name: &str) -> String {
    let r = s
        .entity("Org")
        .unwrap()
        .insert(
            &user(sub),
            row(json!({"name": name, "members": [{"user": sub, "role": "OWNER"}]})),
        )
        .await
        .unwrap_or_else(|e| panic!("{sub} creates {name}: {e:?}"));
    id(&r)
}

async fn member(s: &Store, by: &str, org: &str, who: &str, role: &str) -> Result<Row, StoreError> {
    s.entity("Member")
        .unwrap()
        .insert(
            &user(by),
            row(json!({"org": org, "user": who, "role": role})),
        )
        .await
}

async fn project_names(s: &Store, sub: &str) -> Vec<String> {
    let page = s
        .entity("Project")
        .unwrap()
        .list(&user(sub), &ListQuery::default())
        .await
        .unwrap();
    let mut out: Vec<String> = page
        .rows
        .into_rows()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    out.sort();
    out
}

fn forbidden<T: std::fmt::Debug>(r: Result<T, StoreError>, what: &str) {
    assert!(
        matches!(r, Err(StoreError::Forbidden { .. })),
        "{what}: expected Forbidden, got {r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_in_two_orgs_sees_both_orgs_projects_and_not_a_third() {
    for db in TestDb::each().await {
        let s = db.open(SDL).await;
        let acme = org(&s, "alice", "acme").await;
        let globex = org(&s, "gina", "globex").await;
        let initech = org(&s, "ivan", "initech").await;
        member(&s, "alice", &acme, "bob", "MEMBER").await.unwrap();
        member(&s, "gina", &globex, "bob", "MEMBER").await.unwrap();
        let projects = s.entity("Project").unwrap();
        for (by, org, name) in [
            ("alice", &acme, "rockets"),
            ("gina", &globex, "widgets"),
            ("ivan", &initech, "tps"),
        ] {
            projects
                .insert(&user(by), row(json!({"org": org, "name": name})))
                .await
                .unwrap();
        }
        assert_eq!(
            project_names(&s, "bob").await,
            ["rockets", "widgets"],
            "{}",
            db.backend()
        );
        assert_eq!(project_names(&s, "alice").await, ["rockets"]);
        assert_eq!(project_names(&s, "mallory").await, Vec::<String>::new());
        // Nor may bob write into the third, which he cannot even see.
        let r = projects
            .insert(&user("bob"), row(json!({"org": initech, "name": "x"})))
            .await;
        assert!(matches!(r, Err(StoreError::Invalid { .. })), "{r:?}");
        // Orgs and members are read the same way.
        let orgs = s.entity("Org").unwrap();
        assert_eq!(
            orgs.count(&user("bob"), None).await.unwrap(),
            2,
            "bob's orgs"
        );
        let members = s.entity("Member").unwrap();
        assert_eq!(
            members.count(&user("bob"), None).await.unwrap(),
            4,
            "the members of bob's two orgs"
        );
        // Leaving an org takes its projects away.
        let bobs = members
            .list(&user("gina"), &ListQuery::default())
            .await
            .unwrap()
            .rows
            .into_rows()
            .into_iter()
            .find(|m| m["user"] == "bob")
            .unwrap();
        members.delete(&user("gina"), &id(&bobs)).await.unwrap();
        assert_eq!(project_names(&s, "bob").await, ["rockets"]);
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_membership_row_cannot_grant_its_own_author_ownership() {
    for db in TestDb::each().await {
        let s = db.open(SDL).await;
        let acme = org(&s, "alice", "acme").await;
        let bobs = org(&s, "bob", "bobs").await;
        let backend = db.backend();
        // bob, in no role at acme, cannot make himself its owner: he
        // cannot even see it, so it reads as missing...
        let r = member(&s, "bob", &acme, "bob", "OWNER").await;
        assert!(
            matches!(r, Err(StoreError::Invalid { .. })),
            "{backend}: bob makes himself owner of acme: {r:?}"
        );
        // ...nor can a plain member.
        let m = member(&s, "alice", &acme, "bob", "MEMBER").await.unwrap();
        forbidden(
            member(&s, "bob", &acme, "bob", "OWNER").await,
            "a member makes himself owner",
        );
        forbidden(
            s.entity("Member")
                .unwrap()
                .update(&user("bob"), &id(&m), row(json!({"role": "OWNER"})))
                .await,
            "a member promotes his own row",
        );
        // An owner may add owners, and the org's creator (an owner field
        // of the org, filled from the token) may too.
        member(&s, "alice", &acme, "carol", "OWNER").await.unwrap();
        member(&s, "carol", &acme, "dave", "OWNER").await.unwrap();
        // bob remains the owner of his own org only.
        member(&s, "bob", &bobs, "erin", "MEMBER").await.unwrap();
        let orgs = s.entity("Org").unwrap();
        forbidden(
            orgs.update(&user("bob"), &acme, row(json!({"name": "mine"})))
                .await,
            "a member renames the org",
        );
        orgs.update(&user("carol"), &acme, row(json!({"name": "Acme"})))
            .await
            .unwrap();
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creating_an_org_with_oneself_as_first_owner_takes_one_request() {
    for db in TestDb::each().await {
        let s = db.open(SDL).await;
        let r = s
            .entity("Org")
            .unwrap()
            .insert(
                &user("dana"),
                row(json!({"name": "new", "members": [{"user": "dana", "role": "OWNER"}]})),
            )
            .await
            .unwrap();
        assert_eq!(r["createdBy"], "dana", "{}", db.backend());
        let org = id(&r);
        let orgs = s.entity("Org").unwrap();
        assert!(orgs.get(&user("dana"), &org).await.unwrap().is_some());
        assert!(orgs.get(&user("eve"), &org).await.unwrap().is_none());
        // As its owner, dana may rename it.
        orgs.update(&user("dana"), &org, row(json!({"name": "newer"})))
            .await
            .unwrap();
        // Naming another creator is refused, and with it the members.
        forbidden(
            orgs.insert(
                &user("eve"),
                row(json!({"name": "x", "createdBy": "dana",
                           "members": [{"user": "eve", "role": "OWNER"}]})),
            )
            .await,
            "eve creates an org in dana's name",
        );
        assert_eq!(orgs.count(&AccessContext::system(), None).await.unwrap(), 1);
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_row_being_written_does_not_count_towards_its_own_rule() {
    for db in TestDb::each().await {
        let s = db.open(SDL).await;
        // Created by alice, bob its only other owner.
        let acme = org(&s, "alice", "acme").await;
        let owner = member(&s, "alice", &acme, "bob", "OWNER").await.unwrap();
        let members = s.entity("Member").unwrap();
        // bob's ownership comes from this very row: it cannot vouch for a
        // change to itself (handing it to mallory, say).
        forbidden(
            members
                .update(&user("bob"), &id(&owner), row(json!({"user": "mallory"})))
                .await,
            &format!("{}: bob's own row vouches for its change", db.backend()),
        );
        // With a second owner row, the first may change: the other row
        // vouches for him.
        let second = member(&s, "alice", &acme, "bob", "OWNER").await.unwrap();
        members
            .update(&user("bob"), &id(&owner), row(json!({"role": "MEMBER"})))
            .await
            .unwrap();
        // And the second can no longer change itself.
        forbidden(
            members
                .update(&user("bob"), &id(&second), row(json!({"role": "MEMBER"})))
                .await,
            "bob's last owner row",
        );
        // Fields reached through a relation filter are not owner fields:
        // `user` is neither filled from the token nor write-once.
        let r = members
            .insert(&user("alice"), row(json!({"org": acme, "role": "MEMBER"})))
            .await;
        assert!(matches!(r, Err(StoreError::Invalid { .. })), "{r:?}");
        members
            .update(&user("alice"), &id(&second), row(json!({"user": "carol"})))
            .await
            .unwrap();
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_events_are_judged_by_relation_rules_on_every_kind() {
    for db in TestDb::each().await {
        let s = db.open(SDL).await;
        let acme = org(&s, "alice", "acme").await;
        member(&s, "alice", &acme, "bob", "MEMBER").await.unwrap();
        let projects = s.entity("Project").unwrap();
        let mut feed = s.subscribe();
        let p = projects
            .insert(&user("alice"), row(json!({"org": acme, "name": "p"})))
            .await
            .unwrap();
        projects
            .update(&user("bob"), &id(&p), row(json!({"name": "q"})))
            .await
            .unwrap();
        projects.delete(&user("alice"), &id(&p)).await.unwrap();
        for kind in ["created", "updated", "deleted"] {
            let ev = feed.recv().await.unwrap();
            let r: Row = ev.new.clone().or(ev.old.clone()).unwrap();
            let sees = |who: &'static str| {
                let projects = projects.clone();
                let r = r.clone();
                async move { projects.visible(&user(who), &r).await.unwrap() }
            };
            assert!(sees("alice").await, "{}: alice, {kind}", db.backend());
            assert!(sees("bob").await, "bob, {kind}");
            assert!(!sees("mallory").await, "mallory, {kind}");
        }
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_org_deleted_with_its_members_reaches_the_members_who_could_read_it() {
    let sdl = SDL.replace(
        "  org: Org!\n  user:",
        "  org: Org! @relation(onDelete: CASCADE)\n  user:",
    );
    assert_ne!(sdl, SDL);
    for db in TestDb::each().await {
        let s = db.open(sdl.as_str()).await;
        let acme = org(&s, "alice", "acme").await;
        member(&s, "alice", &acme, "bob", "MEMBER").await.unwrap();
        let mut feed = s.subscribe();
        s.entity("Org")
            .unwrap()
            .delete(&user("alice"), &acme)
            .await
            .unwrap()
            .unwrap();
        // Two members, then the org: each judged with the rows deleted
        // together as they were.
        for _ in 0..3 {
            let ev = feed.recv().await.unwrap();
            let rows = s.entity(&ev.entity).unwrap();
            let r = ev.old.clone().unwrap();
            for (who, sees) in [("alice", true), ("bob", true), ("mallory", false)] {
                assert_eq!(
                    rows.visible(&user(who), &r).await.unwrap(),
                    sees,
                    "{}: {who}, {} deleted",
                    db.backend(),
                    ev.entity
                );
            }
        }
        // An org that stays has lost the members deleted before, even
        // those deleted together (kept for their own events).
        let globex = org(&s, "gina", "globex").await;
        let bob = member(&s, "gina", &globex, "bob", "MEMBER").await.unwrap();
        let carl = member(&s, "gina", &globex, "carl", "MEMBER").await.unwrap();
        let txn = s.begin_write();
        let members = txn.entity("Member").unwrap();
        for m in [&bob, &carl] {
            members
                .delete(&user("gina"), &id(m))
                .await
                .unwrap()
                .unwrap();
        }
        txn.commit().await.unwrap();
        let orgs = s.entity("Org").unwrap();
        let r = orgs
            .update(&user("gina"), &globex, row(json!({"name": "Globex"})))
            .await
            .unwrap();
        assert!(orgs.visible(&user("gina"), &r).await.unwrap());
        assert!(!orgs.visible(&user("bob"), &r).await.unwrap());
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_claim_matches_nothing_through_none_every_and_not() {
    // "Boards a user is not banned from", written three ways.
    const BANS: &str = r#"
type Query { none: [ByNone!]! not: [ByNot!]! every: [ByEvery!]! }
type ByNone @policy(read: {bans_none: {user: "$sub"}}) { id: ID! bans: [Ban!]! }
type ByNot @policy(read: {NOT: {bans_some: {user: "$sub"}}}) { id: ID! bans: [Ban!]! }
type ByEvery @policy(read: {bans_every: {NOT: {user: "$sub"}}}) { id: ID! bans: [Ban!]! }
type Ban { id: ID! none: ByNone not: ByNot every: ByEvery user: String! }
"#;
    for db in TestDb::each().await {
        let s = db.open(BANS).await;
        let sys = AccessContext::system();
        for (entity, via) in [("ByNone", "none"), ("ByNot", "not"), ("ByEvery", "every")] {
            let boards = s.entity(entity).unwrap();
            let banned = id(&boards.insert(&sys, Row::new()).await.unwrap());
            boards.insert(&sys, Row::new()).await.unwrap();
            s.entity("Ban")
                .unwrap()
                .insert(&sys, row(json!({ via: banned, "user": "alice" })))
                .await
                .unwrap();
            let count = |ctx: AccessContext| {
                let boards = boards.clone();
                async move { boards.count(&ctx, None).await.unwrap() }
            };
            let at = format!("{}: {entity}", db.backend());
            assert_eq!(count(user("alice")).await, 1, "{at}: alice");
            assert_eq!(count(user("bob")).await, 2, "{at}: bob");
            // A caller without `sub` (a client acting for itself) sees what
            // every caller sees, the board that bans no one; not the one
            // whose answer depends on the claim it lacks (a missing claim
            // matches nothing, under `_none`, `NOT` and `_every` too).
            let client = caller_with(&["read"], json!({}));
            assert_eq!(count(client.clone()).await, 1, "{at}: a caller without sub");
            assert!(
                boards.get(&client, &banned).await.unwrap().is_none(),
                "{at}: a caller without sub reads the board banning alice"
            );
        }
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_claim_matches_nothing_through_a_path_under_not() {
    // "Notes not on a board of mine".
    const NOTES: &str = r#"
type Query { notes: [Note!]! boards: [Board!]! }
type Board { id: ID! owner: String! notes: [Note!]! }
type Note @policy(read: {NOT: {board: {owner: "$sub"}}}) { id: ID! board: Board text: String! }
"#;
    for db in TestDb::each().await {
        let s = db.open(NOTES).await;
        let sys = AccessContext::system();
        let board = id(&s
            .entity("Board")
            .unwrap()
            .insert(&sys, row(json!({"owner": "alice"})))
            .await
            .unwrap());
        let notes = s.entity("Note").unwrap();
        notes
            .insert(
                &sys,
                row(json!({"board": board, "text": "on alice's board"})),
            )
            .await
            .unwrap();
        notes
            .insert(&sys, row(json!({"text": "on no board"})))
            .await
            .unwrap();
        let count = |ctx: AccessContext| {
            let notes = notes.clone();
            async move { notes.count(&ctx, None).await.unwrap() }
        };
        let at = db.backend();
        assert_eq!(count(user("alice")).await, 0, "{at}: alice");
        assert!(count(user("bob")).await >= 1, "{at}: bob");
        // Without `sub`, the board's answer depends on the missing claim:
        // not a match, though no board's owner equals a claim it lacks.
        let client = caller_with(&["read"], json!({}));
        assert_eq!(count(client).await, 0, "{at}: a caller without sub");
        s.close().await;
    }
}
