//! Accounts as rows on every backend: SQLite and, when
//! `GATEHOUSE_TEST_POSTGRES_URL` is set, PostgreSQL. The row and its
//! credential are written together; whatever path changes a row, its
//! tokens follow in the same transaction.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use serde_json::json;

use gatehouse_accounts::StoreAccounts;
use gatehouse_auth::{Accounts, AuthRepo, Claims, TokenKind, TokenRecord, UserRecord};
use gatehouse_auth_store::SqlAuthRepo;
use gatehouse_store::{AccessContext, Row, Store};
use gatehouse_testkit::TestDb;

const SDL: &str = r#"
type User @account @policy(read: {id: "$sub"}, bypass: "admin") {
  id: ID!
  username: String! @unique
  disabled: Boolean
  org: String @claim
  level: Int @claim(name: "lvl")
}
"#;

struct Fixture {
    store: Store,
    repo: Arc<SqlAuthRepo>,
    accounts: StoreAccounts,
}

async fn fixtures() -> Vec<(TestDb, Fixture)> {
    let mut out = Vec::new();
    for db in TestDb::each().await {
        let store = db.open(SDL).await;
        let repo = Arc::new(SqlAuthRepo::new(store.db().clone()));
        repo.ensure_tables().await.unwrap();
        let accounts = StoreAccounts::new(&store, repo.clone()).unwrap();
        out.push((
            db,
            Fixture {
                store,
                repo,
                accounts,
            },
        ));
    }
    out
}

fn credential() -> UserRecord {
    UserRecord {
        username: String::new(),
        password_hash: "$argon2id$not-a-real-hash".into(),
        scopes: vec!["read".into()],
        claims: Claims::new(),
        created_at: 1,
        updated_at: 1,
    }
}

fn claims(v: serde_json::Value) -> Claims {
    v.as_object().unwrap().clone()
}

fn token(id: &str, kind: TokenKind, sub: &str) -> TokenRecord {
    TokenRecord {
        id: id.into(),
        kind,
        subject: sub.into(),
        username: Some(sub.into()),
        client_id: "app".into(),
        scope: vec!["read".into()],
        audience: Vec::new(),
        issued_at: 1,
        expires_at: i64::MAX / 2,
        revoked: false,
        family_id: format!("family-{sub}"),
        parent_id: None,
        used_at: None,
        successor_id: None,
        idp: None,
    }
}

async fn revoked(repo: &SqlAuthRepo, id: &str) -> bool {
    repo.get_token(id).await.unwrap().unwrap().revoked
}

#[tokio::test]
async fn an_account_and_its_credential_are_created_together() {
    for (db, f) in fixtures().await {
        let b = db.backend();
        let made = f
            .accounts
            .create(
                "alice",
                None,
                None,
                &claims(json!({"org": "acme", "lvl": "2"})),
                &credential(),
            )
            .await
            .unwrap()
            .unwrap();
        assert_ne!(made.sub, "alice", "{b}");
        assert_eq!(made.claims, claims(json!({"org": "acme", "lvl": 2})), "{b}");
        let stored = f.repo.find_user(&made.sub).await.unwrap().unwrap();
        assert_eq!(stored.scopes, ["read"], "{b}");
        assert_eq!(
            f.accounts.find_by_username("alice").await.unwrap(),
            Some(made.clone()),
            "{b}"
        );

        // A taken name writes nothing: no second row, no stray credential.
        let again = f
            .accounts
            .create("alice", None, None, &Claims::new(), &credential())
            .await
            .unwrap();
        assert!(again.is_none(), "{b}");
        assert_eq!(f.repo.list_users().await.unwrap().len(), 1, "{b}");

        // A claim the type has no field for is refused, naming the known ones.
        let err = f
            .accounts
            .create(
                "bob",
                None,
                None,
                &claims(json!({"team": "x"})),
                &credential(),
            )
            .await
            .unwrap_err();
        assert!(
            err.description().contains("org, lvl"),
            "{b}: {}",
            err.description()
        );
        assert!(
            f.accounts.find_by_username("bob").await.unwrap().is_none(),
            "{b}"
        );
    }
}

#[tokio::test]
async fn a_claim_change_revokes_access_tokens_and_keeps_refresh_tokens() {
    for (db, f) in fixtures().await {
        let b = db.backend();
        let alice = f
            .accounts
            .create(
                "alice",
                None,
                None,
                &claims(json!({"org": "acme"})),
                &credential(),
            )
            .await
            .unwrap()
            .unwrap();
        f.repo
            .insert_token(&token("a1", TokenKind::Access, &alice.sub))
            .await
            .unwrap();
        f.repo
            .insert_token(&token("r1", TokenKind::Refresh, &alice.sub))
            .await
            .unwrap();

        // A change of another field revokes nothing.
        let mut patch = Row::new();
        patch.insert("disabled".into(), json!(false));
        f.store
            .entity("User")
            .unwrap()
            .update(&AccessContext::system(), &alice.sub, patch)
            .await
            .unwrap();
        assert!(!revoked(&f.repo, "a1").await, "{b}");

        f.accounts
            .set_claims(&alice.sub, &claims(json!({"org": "globex"})))
            .await
            .unwrap();
        assert!(revoked(&f.repo, "a1").await, "{b}");
        assert!(!revoked(&f.repo, "r1").await, "{b}");
    }
}

#[tokio::test]
async fn disabling_or_deleting_an_account_revokes_every_token() {
    for (db, f) in fixtures().await {
        let b = db.backend();
        let users = f.store.entity("User").unwrap();
        let mut subs = Vec::new();
        for name in ["carol", "dave"] {
            let made = f
                .accounts
                .create(name, None, None, &Claims::new(), &credential())
                .await
                .unwrap()
                .unwrap();
            for kind in [TokenKind::Access, TokenKind::Refresh] {
                let id = format!("{name}-{}", kind.as_str());
                f.repo
                    .insert_token(&token(&id, kind, &made.sub))
                    .await
                    .unwrap();
            }
            subs.push(made.sub);
        }

        // Disabled by a bypass caller's update, as GraphQL or REST make it.
        let mut patch = Row::new();
        patch.insert("disabled".into(), json!(true));
        users
            .update(&AccessContext::system(), &subs[0], patch)
            .await
            .unwrap();
        assert!(revoked(&f.repo, "carol-access").await, "{b}");
        assert!(revoked(&f.repo, "carol-refresh").await, "{b}");
        assert!(!revoked(&f.repo, "dave-access").await, "{b}");

        // Deleted: its tokens revoked and its credential gone, in the
        // deleting transaction.
        assert!(f.accounts.delete(&subs[1]).await.unwrap(), "{b}");
        assert!(revoked(&f.repo, "dave-refresh").await, "{b}");
        assert!(f.repo.find_user(&subs[1]).await.unwrap().is_none(), "{b}");
        assert!(!f.accounts.delete(&subs[1]).await.unwrap(), "{b}");
    }
}

#[tokio::test]
async fn users_from_before_the_account_type_become_rows_named_as_before() {
    for (db, f) in fixtures().await {
        let b = db.backend();
        let mut dave = credential();
        dave.username = "dave".into();
        dave.claims = claims(json!({"org": "acme", "gone": "x"}));
        f.repo.upsert_user(&dave).await.unwrap();

        assert_eq!(
            f.accounts.adopt_users(f.repo.as_ref()).await.unwrap(),
            1,
            "{b}"
        );
        let row = f.accounts.find("dave").await.unwrap().unwrap();
        assert_eq!(row.username, "dave", "{b}");
        assert_eq!(row.claims, claims(json!({"org": "acme"})), "{b}");
        // Idempotent: a second start makes nothing.
        assert_eq!(
            f.accounts.adopt_users(f.repo.as_ref()).await.unwrap(),
            0,
            "{b}"
        );
    }
}
