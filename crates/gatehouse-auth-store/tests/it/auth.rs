//! `SqlAuthRepo` against `MemoryRepo`, the reference semantics: one case per
//! `AuthRepo` method, each run on `MemoryRepo` and on every backend and
//! required to give the same transcript. Then what only a database can show:
//! racing refresh-token use across two instances, two `AuthServer`s over one
//! database, and a restart keeping issued tokens valid.

use std::sync::Arc;

use gatehouse_auth::{
    AuthConfig, AuthRepo, AuthServer, ClientRecord, ClientType, Clock, CodeRecord, ConsumerRecord,
    Error, Grant, IdentityKind, KeyRecord, MemoryRepo, NameTaken, NewClient, NewIdentity,
    OAuth1TokenKind, OAuth1TokenRecord, SigningAlg, SystemClock, SystemRandom, TokenKind,
    TokenRecord, UserRecord,
};
use gatehouse_auth_store::SqlAuthRepo;
use gatehouse_store::{Store, StoreOptions};
use gatehouse_testkit::TestDb;

use crate::SDL;

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn client(id: &str, t: i64) -> ClientRecord {
    ClientRecord {
        client_id: id.into(),
        // Zero and high bytes: the hash must come back byte for byte.
        secret_hash: vec![0, 1, 0x7f, 0x80, 0xff, t as u8],
        grants: vec![Grant::Password, Grant::RefreshToken],
        scopes: strings(&["read", "write"]),
        audiences: vec![],
        created_at: t,
        updated_at: t,
        // Odd ids are public first-party clients with redirect URIs, so
        // both shapes go through the store.
        client_type: if t % 2 == 1 {
            ClientType::Public
        } else {
            ClientType::Confidential
        },
        first_party: t % 2 == 1,
        redirect_uris: if t % 2 == 1 {
            strings(&["https://app.example/cb", "http://127.0.0.1/cb"])
        } else {
            vec![]
        },
        // Every third registered an ID token algorithm; the others take
        // the default.
        id_token_signed_response_alg: (t % 3 == 0).then_some(SigningAlg::Es256),
    }
}

fn user(name: &str, t: i64) -> UserRecord {
    UserRecord {
        username: name.into(),
        password_hash: format!("$argon2id$v=19$m=19456,t=2,p=1$c2FsdA${name}"),
        scopes: strings(&["read"]),
        // Every kind of value a claim may take, and a name past `z`.
        claims:
            serde_json::json!({"org": "acme", "level": 3, "ratio": 0.5, "staff": true, "é": "ü"})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        created_at: t,
        updated_at: t,
    }
}

fn key(kid: &str, t: i64) -> KeyRecord {
    KeyRecord {
        kid: kid.into(),
        alg: "EdDSA".into(),
        public_jwk: format!(r#"{{"kty":"OKP","crv":"Ed25519","x":"{kid}"}}"#),
        private_sealed: vec![0, 0xff, 3, t as u8],
        created_at: t,
        retired_at: None,
        publish_until: None,
    }
}

fn token(id: &str, kind: TokenKind, family: &str, client: &str, user: Option<&str>) -> TokenRecord {
    TokenRecord {
        id: id.into(),
        kind,
        subject: user.unwrap_or(client).into(),
        username: user.map(str::to_string),
        client_id: client.into(),
        scope: strings(&["read", "offline_access"]),
        audience: strings(&["https://api.test"]),
        issued_at: 1_000,
        expires_at: 5_000,
        revoked: false,
        family_id: family.into(),
        parent_id: None,
        used_at: None,
        successor_id: None,
        idp: None,
    }
}

/// Runs `$body` with `$r: &dyn AuthRepo` on `MemoryRepo`, then on a
/// `SqlAuthRepo` per backend; the body's value (a transcript) must be equal.
macro_rules! same_as_memory {
    ($name:ident, |$r:ident| $body:block) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let memory = MemoryRepo::new();
            let expected = {
                let $r: &dyn AuthRepo = &memory;
                $body
            };
            for db in TestDb::each().await {
                eprintln!("{}: {}", stringify!($name), db.backend());
                let store = db.open(SDL).await;
                let repo = SqlAuthRepo::new(store.db().clone());
                let got = {
                    let $r: &dyn AuthRepo = &repo;
                    $body
                };
                assert_eq!(got, expected, "{}: differs from MemoryRepo", db.backend());
                store.close().await;
            }
        }
    };
}

// ------------------------------------------------------------------ names

// Users, clients and consumers share one namespace of names.
same_as_memory!(register, |r| {
    let u = user("bob", 1);
    let c = client("app", 2);
    let k = consumer("printer", 3);
    let mut out = vec![
        r.register(NewIdentity::User(&u)).await.unwrap(),
        r.register(NewIdentity::Client(&c)).await.unwrap(),
        r.register(NewIdentity::Consumer(&k)).await.unwrap(),
    ];
    // Each name again, as each kind: refused, naming the holder.
    for name in ["bob", "app", "printer"] {
        out.push(r.register(NewIdentity::User(&user(name, 9))).await.unwrap());
        out.push(
            r.register(NewIdentity::Client(&client(name, 9)))
                .await
                .unwrap(),
        );
        out.push(
            r.register(NewIdentity::Consumer(&consumer(name, 9)))
                .await
                .unwrap(),
        );
    }
    // Nothing written by a refusal; the registered records read back whole.
    assert_eq!(r.find_user("bob").await.unwrap(), Some(u));
    assert_eq!(r.get_client("app").await.unwrap(), Some(c));
    assert_eq!(r.get_consumer("printer").await.unwrap(), Some(k));
    assert!(r.find_user("app").await.unwrap().is_none());
    assert!(r.get_client("bob").await.unwrap().is_none());
    assert!(r.get_consumer("bob").await.unwrap().is_none());
    // Names compare without regard to ASCII case: the holder is named
    // as spelled.
    out.push(
        r.register(NewIdentity::Client(&client("BOB", 4)))
            .await
            .unwrap(),
    );
    out.push(
        r.register(NewIdentity::User(&user("Printer", 4)))
            .await
            .unwrap(),
    );
    assert_eq!(
        out.last(),
        Some(&Some(NameTaken::Live(
            IdentityKind::Consumer,
            "printer".into()
        )))
    );
    // Case variants stored before names were folded: the first by kind,
    // then by byte order, is named.
    r.upsert_client(&client("Zed", 5)).await.unwrap();
    r.upsert_user(&user("zED", 5)).await.unwrap();
    r.upsert_user(&user("ZEd", 5)).await.unwrap();
    out.push(
        r.register(NewIdentity::User(&user("zed", 6)))
            .await
            .unwrap(),
    );
    (
        out,
        r.list_users().await.unwrap().len(),
        r.list_clients().await.unwrap().len(),
    )
});

// A removed user's, client's or consumer's name is retired: no later
// registration of any kind, in any case, gets it (a `sub` is never
// reassigned); removing it again retires nothing more.
same_as_memory!(removed_names_stay_retired, |r| {
    r.register(NewIdentity::User(&user("dave", 1)))
        .await
        .unwrap();
    r.register(NewIdentity::Client(&client("Cli", 2)))
        .await
        .unwrap();
    r.register(NewIdentity::Consumer(&consumer("printer", 3)))
        .await
        .unwrap();
    let removed = (
        r.delete_user("dave").await.unwrap(),
        r.delete_client("Cli").await.unwrap(),
        r.delete_consumer("printer").await.unwrap(),
        r.delete_user("dave").await.unwrap(),
        r.delete_user("nobody").await.unwrap(),
    );
    assert_eq!(removed, (true, true, true, false, false));
    let mut out = vec![];
    for name in ["dave", "DAVE", "cli", "PRINTER", "nobody"] {
        out.push(r.register(NewIdentity::User(&user(name, 9))).await.unwrap());
        out.push(
            r.register(NewIdentity::Client(&client(name, 9)))
                .await
                .unwrap(),
        );
    }
    assert_eq!(
        out[0],
        Some(NameTaken::Retired(IdentityKind::User, "dave".into()))
    );
    assert_eq!(
        out[4],
        Some(NameTaken::Retired(IdentityKind::Client, "Cli".into()))
    );
    // "nobody" was never held: registered as a user, then held by it.
    assert_eq!(out[8], None);
    // Nothing of the refused registrations was written.
    let users: Vec<_> = r
        .list_users()
        .await
        .unwrap()
        .into_iter()
        .map(|u| u.username)
        .collect();
    assert_eq!(users, ["nobody"]);
    // A name held again through `upsert_user` (bootstrap of a stored
    // record) and removed again keeps its first record.
    r.upsert_user(&user("dave", 10)).await.unwrap();
    let again = r.delete_user("dave").await.unwrap();
    out.push(
        r.register(NewIdentity::Consumer(&consumer("Dave", 11)))
            .await
            .unwrap(),
    );
    (removed, again, out, users)
});

/// Two instances register one name at once, as a user and as a client:
/// exactly one wins, and the other is told who holds the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn register_race_has_one_winner() {
    for db in TestDb::each().await {
        let s1 = db.open(SDL).await;
        let s2 = second_instance(&db).await;
        let r1 = Arc::new(SqlAuthRepo::new(s1.db().clone()));
        let r2 = Arc::new(SqlAuthRepo::new(s2.db().clone()));
        for i in 0..10 {
            let name = format!("n{i}");
            let (u, c) = (user(&name, 1), client(&name, 1));
            let (a, b) = tokio::join!(
                r1.register(NewIdentity::User(&u)),
                r2.register(NewIdentity::Client(&c))
            );
            let (a, b) = (a.unwrap(), b.unwrap());
            assert!(
                matches!(
                    (&a, &b),
                    (None, Some(NameTaken::Live(IdentityKind::User, _)))
                        | (Some(NameTaken::Live(IdentityKind::Client, _)), None)
                ),
                "{}: {name}: exactly one wins ({a:?}, {b:?})",
                db.backend()
            );
            let users = r1.find_user(&name).await.unwrap().is_some();
            let clients = r1.get_client(&name).await.unwrap().is_some();
            assert!(users ^ clients, "{}: {name}", db.backend());
        }
        s1.close().await;
        s2.close().await;
    }
}

// ------------------------------------------------------------------ clients

same_as_memory!(get_client, |r| {
    let before = r.get_client("app").await.unwrap();
    let c = client("app", 11);
    r.upsert_client(&c).await.unwrap();
    let after = r.get_client("app").await.unwrap();
    assert_eq!(after.as_ref(), Some(&c), "round trip");
    (before, after, r.get_client("APP").await.unwrap())
});

same_as_memory!(upsert_client, |r| {
    r.upsert_client(&client("app", 11)).await.unwrap();
    let mut changed = client("app", 20);
    changed.secret_hash = vec![9; 32];
    changed.grants = vec![Grant::ClientCredentials];
    changed.redirect_uris = strings(&["com.example.app:/cb"]);
    changed.first_party = !changed.first_party;
    changed.audiences = strings(&["https://a", "https://b"]);
    changed.scopes = vec![];
    r.upsert_client(&changed).await.unwrap();
    let got = r.get_client("app").await.unwrap();
    assert_eq!(got.as_ref(), Some(&changed), "replaced whole");
    (got, r.list_clients().await.unwrap().len())
});

same_as_memory!(list_clients, |r| {
    let empty = r.list_clients().await.unwrap();
    // Byte order: upper case, then `_`, then lower case.
    for (i, id) in ["b", "a", "_x", "B"].into_iter().enumerate() {
        r.upsert_client(&client(id, i as i64)).await.unwrap();
    }
    let all = r.list_clients().await.unwrap();
    let ids: Vec<_> = all.iter().map(|c| c.client_id.clone()).collect();
    assert_eq!(ids, ["B", "_x", "a", "b"]);
    (empty, all)
});

same_as_memory!(delete_client, |r| {
    r.upsert_client(&client("app", 1)).await.unwrap();
    r.upsert_client(&client("other", 1)).await.unwrap();
    let first = r.delete_client("app").await.unwrap();
    let again = r.delete_client("app").await.unwrap();
    let unknown = r.delete_client("nobody").await.unwrap();
    assert!(first && !again && !unknown);
    (
        first,
        again,
        unknown,
        r.get_client("app").await.unwrap(),
        r.list_clients().await.unwrap(),
    )
});

// ------------------------------------------------------------------ users

same_as_memory!(find_user, |r| {
    let before = r.find_user("alice").await.unwrap();
    let u = user("alice", 5);
    r.upsert_user(&u).await.unwrap();
    let after = r.find_user("alice").await.unwrap();
    assert_eq!(after.as_ref(), Some(&u), "round trip");
    (before, after, r.find_user("Alice").await.unwrap())
});

same_as_memory!(upsert_user, |r| {
    r.upsert_user(&user("alice", 5)).await.unwrap();
    let mut changed = user("alice", 6);
    changed.password_hash = "$argon2id$new".into();
    changed.scopes = strings(&["read", "write", "offline_access"]);
    changed.claims = serde_json::Map::new();
    r.upsert_user(&changed).await.unwrap();
    let got = r.find_user("alice").await.unwrap();
    assert_eq!(got.as_ref(), Some(&changed));
    (got, r.list_users().await.unwrap().len())
});

same_as_memory!(list_users, |r| {
    let empty = r.list_users().await.unwrap();
    for (i, name) in ["zoe", "Bob", "alice", "émile"].into_iter().enumerate() {
        r.upsert_user(&user(name, i as i64)).await.unwrap();
    }
    let all = r.list_users().await.unwrap();
    let names: Vec<_> = all.iter().map(|u| u.username.clone()).collect();
    assert_eq!(names, ["Bob", "alice", "zoe", "émile"]);
    (empty, all)
});

same_as_memory!(delete_user, |r| {
    r.upsert_user(&user("alice", 1)).await.unwrap();
    let first = r.delete_user("alice").await.unwrap();
    let again = r.delete_user("alice").await.unwrap();
    assert!(first && !again);
    (first, again, r.find_user("alice").await.unwrap())
});

// ------------------------------------------------------------------ keys

same_as_memory!(load_keys, |r| {
    let empty = r.load_keys().await.unwrap();
    r.insert_key(&key("k1", 100)).await.unwrap();
    r.insert_key(&key("k2", 200)).await.unwrap();
    let keys = r.load_keys().await.unwrap();
    assert_eq!(keys, vec![key("k1", 100), key("k2", 200)]);
    (empty, keys)
});

same_as_memory!(insert_key, |r| {
    r.insert_key(&key("k1", 100)).await.unwrap();
    let mut other = key("k1", 300);
    other.alg = "ES256".into();
    let duplicate = r.insert_key(&other).await;
    assert!(duplicate.is_err(), "a kid is unique");
    (duplicate.is_err(), r.load_keys().await.unwrap())
});

same_as_memory!(retire_key, |r| {
    r.insert_key(&key("k1", 100)).await.unwrap();
    r.insert_key(&key("k2", 200)).await.unwrap();
    r.retire_key("k1", 200, 3_800).await.unwrap();
    r.retire_key("unknown", 1, 2).await.unwrap();
    let keys = r.load_keys().await.unwrap();
    assert_eq!(keys[0].retired_at, Some(200));
    assert_eq!(keys[0].publish_until, Some(3_800));
    assert_eq!(keys[1].retired_at, None);
    keys
});

// ------------------------------------------------------------------ tokens

same_as_memory!(insert_token, |r| {
    let access = token("jti-1", TokenKind::Access, "f1", "app", Some("alice"));
    let mut refresh = token("rt-1", TokenKind::Refresh, "f1", "app", Some("alice"));
    refresh.parent_id = Some("rt-0".into());
    refresh.used_at = Some(1_500);
    refresh.successor_id = Some("rt-2".into());
    refresh.revoked = true;
    let mut machine = token("jti-2", TokenKind::Access, "f2", "svc", None);
    machine.scope = vec![];
    machine.audience = vec![];
    for t in [&access, &refresh, &machine] {
        r.insert_token(t).await.unwrap();
    }
    let duplicate = r
        .insert_token(&token("jti-1", TokenKind::Refresh, "f9", "x", None))
        .await;
    assert!(duplicate.is_err(), "ids are unique");
    let mut back = Vec::new();
    for t in [&access, &refresh, &machine] {
        let got = r.get_token(&t.id).await.unwrap();
        assert_eq!(got.as_ref(), Some(t), "round trip");
        back.push(got);
    }
    (duplicate.is_err(), back)
});

same_as_memory!(get_token, |r| {
    let missing = r.get_token("nope").await.unwrap();
    r.insert_token(&token("a", TokenKind::Access, "f", "app", None))
        .await
        .unwrap();
    (
        missing,
        r.get_token("a").await.unwrap(),
        r.get_token("A").await.unwrap(),
    )
});

same_as_memory!(revoke_token, |r| {
    r.insert_token(&token("a", TokenKind::Access, "f", "app", None))
        .await
        .unwrap();
    r.insert_token(&token("b", TokenKind::Access, "f", "app", None))
        .await
        .unwrap();
    let first = r.revoke_token("a").await.unwrap();
    let again = r.revoke_token("a").await.unwrap();
    let unknown = r.revoke_token("zzz").await.unwrap();
    let a = r.get_token("a").await.unwrap().unwrap();
    let b = r.get_token("b").await.unwrap().unwrap();
    assert!(a.revoked && !b.revoked);
    (first, again, unknown, a, b)
});

same_as_memory!(revoke_family, |r| {
    for (id, fam) in [("r1", "f1"), ("a1", "f1"), ("a2", "f1"), ("x", "f2")] {
        r.insert_token(&token(id, TokenKind::Access, fam, "app", Some("u")))
            .await
            .unwrap();
    }
    r.revoke_token("a2").await.unwrap();
    let n = r.revoke_family("f1").await.unwrap();
    let again = r.revoke_family("f1").await.unwrap();
    let none = r.revoke_family("nope").await.unwrap();
    assert_eq!((n, again, none), (2, 0, 0));
    let mut revoked = Vec::new();
    for id in ["r1", "a1", "a2", "x"] {
        revoked.push(r.get_token(id).await.unwrap().unwrap().revoked);
    }
    assert_eq!(revoked, [true, true, true, false]);
    (n, again, none, revoked)
});

// Exchanged tokens (RFC 8693) record their subject as parent and join its
// family: revoking a token takes its descendants, nothing else.
same_as_memory!(revoke_token_tree, |r| {
    // f1: refresh r1 -> access a1 (parent r1); exchanged e1 from a1, e2
    // from e1, e3 from a1 (already revoked); sibling a2 (parent r1); f2: an
    // unrelated token whose parent id is a1 but in another family.
    for (id, fam, parent) in [
        ("r1", "f1", None),
        ("a1", "f1", Some("r1")),
        ("e1", "f1", Some("a1")),
        ("e2", "f1", Some("e1")),
        ("e3", "f1", Some("a1")),
        ("a2", "f1", Some("r1")),
        ("x", "f2", Some("a1")),
    ] {
        let mut t = token(id, TokenKind::Access, fam, "app", Some("u"));
        t.parent_id = parent.map(str::to_string);
        r.insert_token(&t).await.unwrap();
    }
    r.revoke_token("e3").await.unwrap();
    let n = r.revoke_token_tree("a1", "f1").await.unwrap();
    let again = r.revoke_token_tree("a1", "f1").await.unwrap();
    let none = r.revoke_token_tree("nope", "f1").await.unwrap();
    assert_eq!((n, again, none), (3, 0, 0));
    let mut revoked = Vec::new();
    for id in ["r1", "a1", "e1", "e2", "e3", "a2", "x"] {
        revoked.push(r.get_token(id).await.unwrap().unwrap().revoked);
    }
    assert_eq!(revoked, [false, true, true, true, true, false, false]);
    // A leaf: only itself.
    r.insert_token(&token("leaf", TokenKind::Access, "f3", "app", None))
        .await
        .unwrap();
    let leaf = r.revoke_token_tree("leaf", "f3").await.unwrap();
    assert_eq!(leaf, 1);
    (n, again, none, revoked, leaf)
});

same_as_memory!(revoke_client_tokens, |r| {
    for (id, client) in [("1", "app"), ("2", "app"), ("3", "other")] {
        r.insert_token(&token(id, TokenKind::Refresh, id, client, None))
            .await
            .unwrap();
    }
    let n = r.revoke_client_tokens("app").await.unwrap();
    let again = r.revoke_client_tokens("app").await.unwrap();
    assert_eq!((n, again), (2, 0));
    let mut revoked = Vec::new();
    for id in ["1", "2", "3"] {
        revoked.push(r.get_token(id).await.unwrap().unwrap().revoked);
    }
    (n, again, revoked)
});

same_as_memory!(revoke_user_tokens, |r| {
    r.insert_token(&token("1", TokenKind::Access, "f", "app", Some("alice")))
        .await
        .unwrap();
    r.insert_token(&token("2", TokenKind::Refresh, "f", "app", Some("alice")))
        .await
        .unwrap();
    r.insert_token(&token("3", TokenKind::Access, "g", "app", Some("bob")))
        .await
        .unwrap();
    // A client named like the user: its subject matches, its username does not.
    r.insert_token(&token("4", TokenKind::Access, "h", "alice", None))
        .await
        .unwrap();
    let n = r.revoke_user_tokens("alice").await.unwrap();
    assert_eq!(n, 2);
    let mut revoked = Vec::new();
    for id in ["1", "2", "3", "4"] {
        revoked.push(r.get_token(id).await.unwrap().unwrap().revoked);
    }
    assert_eq!(revoked, [true, true, false, false]);
    (n, r.revoke_user_tokens("alice").await.unwrap(), revoked)
});

same_as_memory!(mark_refresh_used, |r| {
    r.insert_token(&token("rt", TokenKind::Refresh, "f", "app", Some("u")))
        .await
        .unwrap();
    r.insert_token(&token("at", TokenKind::Access, "f", "app", Some("u")))
        .await
        .unwrap();
    r.insert_token(&token("dead", TokenKind::Refresh, "g", "app", Some("u")))
        .await
        .unwrap();
    r.revoke_token("dead").await.unwrap();
    let outcomes = vec![
        r.mark_refresh_used("at", 2_000, "next").await.unwrap(),
        r.mark_refresh_used("dead", 2_000, "next").await.unwrap(),
        r.mark_refresh_used("missing", 2_000, "next").await.unwrap(),
        r.mark_refresh_used("rt", 2_000, "next").await.unwrap(),
        r.mark_refresh_used("rt", 2_001, "other").await.unwrap(),
    ];
    assert_eq!(outcomes, [false, false, false, true, false]);
    let rt = r.get_token("rt").await.unwrap().unwrap();
    assert_eq!(
        (rt.used_at, rt.successor_id.as_deref()),
        (Some(2_000), Some("next"))
    );
    let untouched = r.get_token("dead").await.unwrap().unwrap();
    assert_eq!(
        (untouched.used_at, untouched.successor_id.as_deref()),
        (None, None)
    );
    (outcomes, rt, untouched)
});

same_as_memory!(replace_successor, |r| {
    r.insert_token(&token("rt", TokenKind::Refresh, "f", "app", Some("u")))
        .await
        .unwrap();
    let unused = r.replace_successor("rt", "s1", "s2").await.unwrap();
    r.mark_refresh_used("rt", 2_000, "s1").await.unwrap();
    let wrong = r.replace_successor("rt", "s0", "s2").await.unwrap();
    let right = r.replace_successor("rt", "s1", "s2").await.unwrap();
    let stale = r.replace_successor("rt", "s1", "s3").await.unwrap();
    let missing = r.replace_successor("nope", "s1", "s2").await.unwrap();
    assert_eq!(
        (unused, wrong, right, stale, missing),
        (false, false, true, false, false)
    );
    let rt = r.get_token("rt").await.unwrap().unwrap();
    assert_eq!(rt.successor_id.as_deref(), Some("s2"));
    ((unused, wrong, right, stale, missing), rt)
});

same_as_memory!(purge_expired, |r| {
    for (id, exp) in [("t100", 100), ("t200", 200), ("t300", 300)] {
        let mut t = token(id, TokenKind::Access, id, "app", None);
        t.expires_at = exp;
        r.insert_token(&t).await.unwrap();
    }
    r.insert_key(&key("current", 1)).await.unwrap();
    r.insert_key(&key("old", 2)).await.unwrap();
    r.insert_key(&key("older", 3)).await.unwrap();
    r.retire_key("old", 50, 250).await.unwrap();
    r.retire_key("older", 50, 150).await.unwrap();
    let n = r.purge_expired(200).await.unwrap();
    // Two tokens (expiry at or before now) and one key.
    assert_eq!(n, 3);
    let mut left = Vec::new();
    for id in ["t100", "t200", "t300"] {
        left.push(r.get_token(id).await.unwrap().is_some());
    }
    assert_eq!(left, [false, false, true]);
    let kids: Vec<_> = r
        .load_keys()
        .await
        .unwrap()
        .into_iter()
        .map(|k| k.kid)
        .collect();
    assert_eq!(kids, ["current", "old"]);
    (n, left, kids, r.purge_expired(200).await.unwrap())
});

// ------------------------------------------------------------------ OAuth 1.0

fn consumer(key: &str, t: i64) -> ConsumerRecord {
    ConsumerRecord {
        key: key.into(),
        secret_sealed: vec![0, 0xff, 7, t as u8],
        scopes: strings(&["read", "write"]),
        created_at: t,
        updated_at: t,
    }
}

fn oauth1_token(id: &str, kind: OAuth1TokenKind, consumer: &str) -> OAuth1TokenRecord {
    OAuth1TokenRecord {
        id: id.into(),
        kind,
        consumer_key: consumer.into(),
        secret_sealed: vec![1, 0, 0xfe],
        callback: Some("oob".into()),
        verifier_hash: None,
        username: None,
        scopes: vec![],
        created_at: 1_000,
        expires_at: 2_000,
        used_at: None,
    }
}

same_as_memory!(oauth1_consumers, |r| {
    let none = r.get_consumer("c").await.unwrap();
    r.upsert_consumer(&consumer("c", 1)).await.unwrap();
    r.upsert_consumer(&consumer("b", 2)).await.unwrap();
    let mut changed = consumer("c", 3);
    changed.scopes = vec![];
    r.upsert_consumer(&changed).await.unwrap();
    let got = r.get_consumer("c").await.unwrap();
    assert_eq!(got.as_ref(), Some(&changed));
    let listed: Vec<String> = r
        .list_consumers()
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.key)
        .collect();
    r.insert_oauth1_token(&oauth1_token("t1", OAuth1TokenKind::Access, "c"))
        .await
        .unwrap();
    let deleted = r.delete_consumer("c").await.unwrap();
    let again = r.delete_consumer("c").await.unwrap();
    let token_gone = r.get_oauth1_token("t1").await.unwrap().is_none();
    (none, got, listed, deleted, again, token_gone)
});

same_as_memory!(oauth1_request_token_lifecycle, |r| {
    let t = oauth1_token("rt", OAuth1TokenKind::Request, "c");
    r.insert_oauth1_token(&t).await.unwrap();
    assert!(r.insert_oauth1_token(&t).await.is_err(), "duplicate id");
    assert_eq!(r.get_oauth1_token("rt").await.unwrap().as_ref(), Some(&t));
    let unapproved_use = r.use_request_token("rt", 1_100).await.unwrap();
    let expired = r
        .approve_request_token("rt", "alice", "vh", &strings(&["read"]), 2_000)
        .await
        .unwrap();
    let first = r
        .approve_request_token("rt", "alice", "vh", &strings(&["read"]), 1_100)
        .await
        .unwrap();
    let second = r
        .approve_request_token("rt", "bob", "vh2", &[], 1_100)
        .await
        .unwrap();
    let used = r.use_request_token("rt", 1_200).await.unwrap();
    let used_again = r.use_request_token("rt", 1_300).await.unwrap();
    let stored = r.get_oauth1_token("rt").await.unwrap().unwrap();
    assert_eq!(stored.username.as_deref(), Some("alice"));
    assert_eq!(stored.verifier_hash.as_deref(), Some("vh"));
    assert_eq!(stored.scopes, strings(&["read"]));
    assert_eq!(stored.used_at, Some(1_200));
    let access = oauth1_token("at", OAuth1TokenKind::Access, "c");
    r.insert_oauth1_token(&access).await.unwrap();
    let access_approve = r
        .approve_request_token("at", "alice", "vh", &[], 1_100)
        .await
        .unwrap();
    (
        unapproved_use,
        expired,
        first,
        second,
        used,
        used_again,
        access_approve,
        stored,
    )
});

same_as_memory!(oauth1_nonces_and_purge, |r| {
    let a = r.insert_nonce("c", "n1", 1_300, 1_000).await.unwrap();
    let replay = r.insert_nonce("c", "n1", 1_400, 1_100).await.unwrap();
    let other_consumer = r.insert_nonce("d", "n1", 1_300, 1_000).await.unwrap();
    let after_expiry = r.insert_nonce("c", "n1", 1_700, 1_300).await.unwrap();
    let replay_later = r.insert_nonce("c", "n1", 1_800, 1_650).await.unwrap();
    r.insert_oauth1_token(&oauth1_token("old", OAuth1TokenKind::Request, "c"))
        .await
        .unwrap();
    let purged = r.purge_oauth1(2_000).await.unwrap();
    let fresh = r.insert_nonce("c", "n1", 2_400, 2_000).await.unwrap();
    (
        a,
        replay,
        other_consumer,
        after_expiry,
        replay_later,
        purged,
        fresh,
    )
});

/// Two instances insert the same nonce at once: exactly one wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nonce_race_has_one_winner() {
    for db in TestDb::each().await {
        let s1 = db.open(SDL).await;
        let s2 = second_instance(&db).await;
        let r1 = Arc::new(SqlAuthRepo::new(s1.db().clone()));
        let r2 = Arc::new(SqlAuthRepo::new(s2.db().clone()));
        for i in 0..20 {
            let nonce = format!("n{i}");
            let (a, b) = tokio::join!(
                r1.insert_nonce("c", &nonce, 5_000, 1_000),
                r2.insert_nonce("c", &nonce, 5_000, 1_000)
            );
            let (a, b) = (a.unwrap(), b.unwrap());
            assert!(
                a ^ b,
                "{}: {nonce}: exactly one wins ({a}, {b})",
                db.backend()
            );
        }
        s1.close().await;
        s2.close().await;
    }
}

// ------------------------------------------------------------------ beyond MemoryRepo

/// Token records are group-committed: many concurrent inserts (several per
/// transaction, in chunks of different sizes) each come back only once
/// written, all readable afterwards; a duplicate id in a batch fails that
/// insert alone; a record written just before the store closes is there
/// after reopening.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_token_inserts_are_group_committed() {
    for db in TestDb::each().await {
        let be = db.backend();
        eprintln!("group commit: {be}");
        let store = db.open(SDL).await;
        let repo = Arc::new(SqlAuthRepo::new(store.db().clone()));
        repo.insert_token(&token("dup", TokenKind::Access, "f", "app", None))
            .await
            .unwrap();
        const N: usize = 300;
        let mut tasks = Vec::new();
        for i in 0..N {
            let repo = repo.clone();
            tasks.push(tokio::spawn(async move {
                // Every 50th is a duplicate of an existing id.
                let id = if i % 50 == 7 {
                    "dup".to_string()
                } else {
                    format!("t{i}")
                };
                repo.insert_token(&token(&id, TokenKind::Access, "f", "app", None))
                    .await
                    .map(|()| id)
            }));
        }
        let mut ok = Vec::new();
        let mut failed = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(id) => ok.push(id),
                Err(e) => {
                    assert!(e.message.contains("duplicate"), "{be}: {e}");
                    failed += 1;
                }
            }
        }
        assert_eq!(failed, N / 50, "{be}: only the duplicates fail");
        assert_eq!(ok.len(), N - N / 50, "{be}");
        for id in &ok {
            assert!(repo.get_token(id).await.unwrap().is_some(), "{be}: {id}");
        }
        let last = token("last", TokenKind::Refresh, "f", "app", None);
        repo.insert_token(&last).await.unwrap();
        drop(repo);
        store.close().await;
        let reopened = db.open(SDL).await;
        let repo = SqlAuthRepo::new(reopened.db().clone());
        assert_eq!(repo.get_token("last").await.unwrap(), Some(last), "{be}");
        reopened.close().await;
    }
}

/// Two more stores on `db`, as two instances would open them.
async fn second_instance(db: &TestDb) -> Store {
    db.open(SDL).await
}

/// Two instances race to spend each refresh token: exactly one wins, and the
/// stored successor is the winner's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mark_refresh_used_race_has_one_winner() {
    for db in TestDb::each().await {
        eprintln!("race: {}", db.backend());
        let s1 = db.open(SDL).await;
        let s2 = second_instance(&db).await;
        let r1 = Arc::new(SqlAuthRepo::new(s1.db().clone()));
        let r2 = Arc::new(SqlAuthRepo::new(s2.db().clone()));
        const N: usize = 40;
        for i in 0..N {
            r1.insert_token(&token(
                &format!("rt{i}"),
                TokenKind::Refresh,
                "f",
                "app",
                None,
            ))
            .await
            .unwrap();
        }
        for i in 0..N {
            let id = format!("rt{i}");
            let barrier = Arc::new(tokio::sync::Barrier::new(2));
            let race = |repo: Arc<SqlAuthRepo>, who: &'static str| {
                let id = id.clone();
                let barrier = barrier.clone();
                tokio::spawn(async move {
                    barrier.wait().await;
                    repo.mark_refresh_used(&id, 2_000, who).await.unwrap()
                })
            };
            let a = race(r1.clone(), "one");
            let b = race(r2.clone(), "two");
            let (a, b) = (a.await.unwrap(), b.await.unwrap());
            assert!(
                a ^ b,
                "{}: {id}: exactly one wins (got {a}, {b})",
                db.backend()
            );
            let stored = r2.get_token(&id).await.unwrap().unwrap();
            let winner = if a { "one" } else { "two" };
            assert_eq!(
                stored.successor_id.as_deref(),
                Some(winner),
                "{}",
                db.backend()
            );
        }
        s1.close().await;
        s2.close().await;
    }
}

/// Concurrent grace-period retries: only one replaces the expected successor.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replace_successor_race_has_one_winner() {
    for db in TestDb::each().await {
        eprintln!("race: {}", db.backend());
        let s1 = db.open(SDL).await;
        let s2 = second_instance(&db).await;
        let r1 = Arc::new(SqlAuthRepo::new(s1.db().clone()));
        let r2 = Arc::new(SqlAuthRepo::new(s2.db().clone()));
        for i in 0..20 {
            let id = format!("rt{i}");
            r1.insert_token(&token(&id, TokenKind::Refresh, "f", "app", None))
                .await
                .unwrap();
            assert!(r1.mark_refresh_used(&id, 1, "s0").await.unwrap());
            let (a, b) = tokio::join!(
                r1.replace_successor(&id, "s0", "a"),
                r2.replace_successor(&id, "s0", "b")
            );
            let (a, b) = (a.unwrap(), b.unwrap());
            assert!(a ^ b, "{}: exactly one wins", db.backend());
        }
        s1.close().await;
        s2.close().await;
    }
}

/// Two instances unlink an account's last two identities at once (the
/// account has no password): one goes, the other stays as its last way to
/// sign in.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unlinking_the_last_two_identities_at_once_keeps_one() {
    for db in TestDb::each().await {
        let s1 = db.open(SDL).await;
        let s2 = second_instance(&db).await;
        let r1 = Arc::new(SqlAuthRepo::new(s1.db().clone()));
        let r2 = Arc::new(SqlAuthRepo::new(s2.db().clone()));
        for round in 0..20 {
            let sub = format!("acct-{round}");
            r1.upsert_user(&UserRecord {
                password_hash: String::new(),
                ..user(&sub, 1)
            })
            .await
            .unwrap();
            let mut ids = Vec::new();
            for n in 0..2 {
                let identity = gatehouse_auth::IdentityRecord {
                    id: format!("{sub}-id{n}"),
                    sub: sub.clone(),
                    provider: format!("p{n}"),
                    issuer: format!("https://idp{n}.example"),
                    subject: sub.clone(),
                    email: None,
                    linked_at: 1,
                };
                assert!(r1.link_identity(&identity).await.unwrap());
                ids.push(identity.id);
            }
            let barrier = Arc::new(tokio::sync::Barrier::new(2));
            let race = |repo: Arc<SqlAuthRepo>, id: String| {
                let (sub, barrier) = (sub.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    repo.unlink_identity(&sub, &id).await.unwrap()
                })
            };
            let a = race(r1.clone(), ids[0].clone());
            let b = race(r2.clone(), ids[1].clone());
            let (a, b) = (a.await.unwrap(), b.await.unwrap());
            assert!(a ^ b, "{}: exactly one goes (got {a}, {b})", db.backend());
            assert_eq!(r2.identities(&sub).await.unwrap().len(), 1);
        }
        s1.close().await;
        s2.close().await;
    }
}

const ISSUER: &str = "https://gatehouse.test";
const SECRET: &str = "a server secret for tests, long enough to be one";

async fn auth_server(store: &Store) -> Arc<AuthServer> {
    AuthServer::start(
        AuthConfig::new(ISSUER),
        Arc::new(SqlAuthRepo::new(store.db().clone())),
        Arc::new(SystemClock),
        Arc::new(SystemRandom),
        SECRET,
    )
    .await
    .unwrap()
}

async fn bootstrap(auth: &AuthServer) {
    let admin = auth.admin();
    admin
        .bootstrap_client(
            &NewClient {
                client_id: "app".into(),
                grants: strings(&["password", "refresh_token"]),
                scopes: strings(&["read", "write"]),
                audiences: vec![],
                ..Default::default()
            },
            "app-secret",
        )
        .await
        .unwrap();
    admin
        .bootstrap_user("alice", "correct horse", &strings(&["read"]))
        .await
        .unwrap();
}

fn now() -> i64 {
    SystemClock.now()
}

/// Scale-out: tokens issued by one instance are valid on all, and
/// revocations reach all. Two `AuthServer`s over two independent stores on
/// one database (PostgreSQL when configured; SQLite too, as two processes
/// sharing a file would).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_tokens_and_revocations() {
    for db in TestDb::each().await {
        let be = db.backend();
        eprintln!("backend: {be}");
        let s1 = db.open(SDL).await;
        let s2 = second_instance(&db).await;
        let one = auth_server(&s1).await;
        bootstrap(&one).await;
        let two = auth_server(&s2).await;
        assert_eq!(
            two.repo().load_keys().await.unwrap().len(),
            SigningAlg::ALL.len(),
            "{be}: the second instance uses the first one's keys"
        );

        let c1 = one.authenticate_client("app", "app-secret").await.unwrap();
        let c2 = two.authenticate_client("app", "app-secret").await.unwrap();
        let issued = one
            .password_grant(&c1, Some("alice"), Some("correct horse"), None, true, None)
            .await
            .unwrap();
        let claims = two
            .validate_access_token(&issued.access_token, now())
            .await
            .unwrap();
        assert_eq!(
            (claims.sub.as_str(), claims.client_id.as_str()),
            ("alice", "app")
        );

        // Revocation on one, refused on the other.
        one.revoke(&c1, &issued.access_token).await.unwrap();
        let err = two
            .validate_access_token(&issued.access_token, now())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidToken(_)), "{be}: {err:?}");

        // Rotation on two; replaying the spent token on one revokes the
        // family everywhere.
        let pair = two
            .password_grant(&c2, Some("alice"), Some("correct horse"), None, true, None)
            .await
            .unwrap();
        let spent = pair.refresh_token.clone().unwrap();
        let rotated = two.refresh_grant(&c2, Some(&spent), None).await.unwrap();
        one.validate_access_token(&rotated.access_token, now())
            .await
            .unwrap();
        let reuse = one
            .refresh_grant(&c1, Some(&spent), None)
            .await
            .unwrap_err();
        assert!(matches!(reuse, Error::InvalidGrant(_)), "{be}: {reuse:?}");
        let err = two
            .validate_access_token(&rotated.access_token, now())
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidToken(_)),
            "{be}: family revoked: {err:?}"
        );
        let err = two
            .refresh_grant(&c2, rotated.refresh_token.as_deref(), None)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidGrant(_)), "{be}: {err:?}");

        // Removing the user on one ends its tokens on the other.
        let third = one
            .password_grant(&c1, Some("alice"), Some("correct horse"), None, false, None)
            .await
            .unwrap();
        two.admin().remove_user("alice").await.unwrap();
        assert!(
            one.validate_access_token(&third.access_token, now())
                .await
                .is_err(),
            "{be}"
        );
        s1.close().await;
        s2.close().await;
    }
}

/// The kids of the stored keys, sorted.
async fn kids(repo: &dyn AuthRepo) -> Vec<String> {
    let mut kids: Vec<String> = repo
        .load_keys()
        .await
        .unwrap()
        .into_iter()
        .map(|k| k.kid)
        .collect();
    kids.sort();
    kids
}

/// A first server on `db`: the bootstrap registrations and a password
/// grant; the tokens and the keys it stored, with the store closed.
async fn first_start(db: &TestDb) -> (gatehouse_auth::TokenResponse, Vec<KeyRecord>) {
    let s = db.open(SDL).await;
    let auth = auth_server(&s).await;
    bootstrap(&auth).await;
    let c = auth.authenticate_client("app", "app-secret").await.unwrap();
    let t = auth
        .password_grant(&c, Some("alice"), Some("correct horse"), None, true, None)
        .await
        .unwrap();
    let keys = auth.repo().load_keys().await.unwrap();
    drop(auth);
    s.close().await;
    (t, keys)
}

/// A database from when the server kept one signing key (the access
/// tokens', EdDSA) gains an RS256 key (and an ES256 one) at the next
/// start: the old key stays current for access tokens and the tokens it
/// signed stay valid; ID tokens are RS256, verified through the JWKS by
/// an independent implementation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_with_one_key_gains_the_rsa_key() {
    for db in TestDb::each().await {
        let be = db.backend();
        eprintln!("backend: {be}");
        let (token, keys) = first_start(&db).await;
        let old_kid = keys.into_iter().find(|k| k.alg == "EdDSA").unwrap().kid;
        // What the keys table held before: the EdDSA key alone.
        let only_eddsa = "DELETE FROM \"_gatehouse_oauth_keys\" WHERE alg <> 'EdDSA'";
        match db.sqlite_path() {
            Some(path) => {
                rusqlite::Connection::open(path)
                    .unwrap()
                    .execute_batch(only_eddsa)
                    .unwrap();
            }
            None => gatehouse_testkit::pg_execute(db.url(), only_eddsa)
                .await
                .unwrap(),
        }
        let s = db.open(SDL).await;
        assert_eq!(
            kids(&SqlAuthRepo::new(s.db().clone())).await,
            vec![old_kid.clone()],
            "{be}"
        );
        let auth = auth_server(&s).await;
        let keys = auth.repo().load_keys().await.unwrap();
        let mut algs: Vec<&str> = keys.iter().map(|k| k.alg.as_str()).collect();
        algs.sort();
        assert_eq!(algs, ["ES256", "EdDSA", "RS256"], "{be}");
        assert!(keys.iter().all(|k| k.retired_at.is_none()), "{be}");
        assert!(keys.iter().any(|k| k.kid == old_kid), "{be}");
        // The old token still validates; new access tokens use the old key.
        auth.validate_access_token(&token.access_token, now())
            .await
            .unwrap();
        let c = auth.authenticate_client("app", "app-secret").await.unwrap();
        let fresh = auth
            .refresh_grant(&c, token.refresh_token.as_deref(), None)
            .await
            .unwrap();
        let header = jsonwebtoken::decode_header(&fresh.access_token).unwrap();
        assert_eq!(header.kid.as_deref(), Some(old_kid.as_str()), "{be}");
        // The JWKS publishes the RSA key; an ID token is RS256.
        let jwks: jsonwebtoken::jwk::JwkSet = serde_json::from_value(auth.jwks()).unwrap();
        assert_eq!(jwks.keys.len(), 3, "{be}");
        auth.admin()
            .bootstrap_client(
                &NewClient {
                    client_id: "rp".into(),
                    grants: strings(&["password"]),
                    scopes: strings(&["openid", "read"]),
                    ..Default::default()
                },
                "rp-secret",
            )
            .await
            .unwrap();
        let rp = auth.authenticate_client("rp", "rp-secret").await.unwrap();
        let t = auth
            .password_grant(
                &rp,
                Some("alice"),
                Some("correct horse"),
                Some("openid"),
                true,
                None,
            )
            .await
            .unwrap();
        let id_token = t.id_token.unwrap();
        let header = jsonwebtoken::decode_header(&id_token).unwrap();
        assert_eq!(header.alg, jsonwebtoken::Algorithm::RS256, "{be}");
        let jwk = jwks.find(header.kid.as_deref().unwrap()).unwrap();
        let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
        v.set_audience(&["rp"]);
        v.set_issuer(&[ISSUER]);
        let claims = jsonwebtoken::decode::<serde_json::Value>(
            &id_token,
            &jsonwebtoken::DecodingKey::from_jwk(jwk).unwrap(),
            &v,
        )
        .unwrap();
        assert_eq!(claims.claims["sub"], "alice", "{be}");
        s.close().await;
    }
}

/// Signing keys are persisted: after a restart (new store, new server, same
/// secret) the tokens issued before are still valid and no key was added.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_issued_tokens_valid() {
    for db in TestDb::each().await {
        let be = db.backend();
        eprintln!("backend: {be}");
        let (token, keys) = first_start(&db).await;
        let mut before: Vec<String> = keys.into_iter().map(|k| k.kid).collect();
        before.sort();
        let s = db.open(SDL).await;
        let auth = auth_server(&s).await;
        let claims = auth
            .validate_access_token(&token.access_token, now())
            .await
            .unwrap();
        assert_eq!(claims.sub, "alice", "{be}");
        assert_eq!(
            before.len(),
            SigningAlg::ALL.len(),
            "{be}: a key per algorithm"
        );
        assert_eq!(
            kids(auth.repo().as_ref()).await,
            before,
            "{be}: no new key at restart"
        );
        let c = auth.authenticate_client("app", "app-secret").await.unwrap();
        auth.refresh_grant(&c, token.refresh_token.as_deref(), None)
            .await
            .unwrap();
        s.close().await;
    }
}

/// A users table created before custom claims existed gets the column on
/// the next start (existing users have none), and starting again changes
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_table_from_before_claims_is_migrated() {
    const OLD: &str = "CREATE TABLE \"_gatehouse_oauth_users\" (username TEXT PRIMARY KEY NOT NULL, \
                       password_hash TEXT NOT NULL, scopes TEXT NOT NULL, \
                       created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL); \
                       INSERT INTO \"_gatehouse_oauth_users\" VALUES ('old', 'h', '[\"read\"]', 1, 2)";
    for db in TestDb::each().await {
        let be = db.backend();
        eprintln!("backend: {be}");
        match db.sqlite_path() {
            Some(path) => {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).unwrap();
                }
                rusqlite::Connection::open(path)
                    .unwrap()
                    .execute_batch(OLD)
                    .unwrap();
            }
            None => {
                gatehouse_testkit::pg_execute(db.url(), OLD).await.unwrap();
            }
        }
        for round in 0..2 {
            let s = db.open(SDL).await;
            let repo = SqlAuthRepo::new(s.db().clone());
            let old = repo.find_user("old").await.unwrap().unwrap();
            assert_eq!(
                (old.scopes, old.claims.len()),
                (strings(&["read"]), 0),
                "{be}"
            );
            if round == 0 {
                repo.upsert_user(&user("new", 3)).await.unwrap();
            }
            assert_eq!(
                repo.find_user("new").await.unwrap(),
                Some(user("new", 3)),
                "{be}: round {round}"
            );
            s.close().await;
        }
    }
}

/// A clients table from before client kinds keeps its clients: they come
/// back confidential, third-party, without redirect URIs, and still
/// authenticate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_table_from_before_client_kinds_is_migrated() {
    // SHA-256 of "old-secret", as the old release stored it.
    let hash = gatehouse_auth::hash_secret("old-secret");
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    for db in TestDb::each().await {
        let be = db.backend();
        eprintln!("backend: {be}");
        let (blob, create) = match db.sqlite_path() {
            Some(_) => (format!("X'{hex}'"), "BLOB"),
            None => (format!("'\\x{hex}'::bytea"), "BYTEA"),
        };
        let old = format!(
            "CREATE TABLE \"_gatehouse_oauth_clients\" (client_id TEXT PRIMARY KEY NOT NULL, \
             secret_hash {create} NOT NULL, grants TEXT NOT NULL, scopes TEXT NOT NULL, \
             audiences TEXT NOT NULL, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL); \
             INSERT INTO \"_gatehouse_oauth_clients\" VALUES ('old', {blob}, \
             '[\"password\",\"refresh_token\"]', '[\"read\"]', '[]', 1, 2)"
        );
        match db.sqlite_path() {
            Some(path) => {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).unwrap();
                }
                rusqlite::Connection::open(path)
                    .unwrap()
                    .execute_batch(&old)
                    .unwrap();
            }
            None => {
                gatehouse_testkit::pg_execute(db.url(), &old).await.unwrap();
            }
        }
        let s = db.open(SDL).await;
        let auth = auth_server(&s).await;
        let c = auth.authenticate_client("old", "old-secret").await.unwrap();
        assert_eq!(c.client_type, ClientType::Confidential, "{be}");
        assert!(!c.first_party && c.redirect_uris.is_empty(), "{be}");
        assert_eq!(c.grants, vec![Grant::Password, Grant::RefreshToken], "{be}");
        assert_eq!(c.id_token_signed_response_alg, None, "{be}");
        assert_eq!(c.id_token_alg(), SigningAlg::Rs256, "{be}");
        s.close().await;
    }
}

fn code_record(id: &str, expires_at: i64) -> CodeRecord {
    CodeRecord {
        id: id.into(),
        client_id: "spa".into(),
        redirect_uri: "https://spa.example/cb".into(),
        code_challenge: "c".repeat(43),
        scope: strings(&["openid", "read"]),
        username: "alice".into(),
        nonce: (id == "n").then(|| "nonce-1".to_string()),
        auth_time: 7,
        issued_at: expires_at - 60,
        expires_at,
        used_at: None,
        family_id: format!("fam-{id}"),
        idp: (id == "n").then(|| "corp".to_string()),
    }
}

same_as_memory!(authorization_codes, |r| {
    r.insert_code(&code_record("a", 1_060)).await.unwrap();
    r.insert_code(&code_record("n", 2_060)).await.unwrap();
    let duplicate = r.insert_code(&code_record("a", 1_060)).await.is_err();
    let first = r.use_code("a", 1_010).await.unwrap();
    let second = r.use_code("a", 1_011).await.unwrap();
    let missing = r.use_code("zz", 1_011).await.unwrap();
    let a = r.get_code("a").await.unwrap();
    let purged = r.purge_codes(1_060).await.unwrap();
    (
        duplicate,
        [first, second, missing],
        a,
        purged,
        r.get_code("a").await.unwrap(),
        r.get_code("n").await.unwrap(),
    )
});

/// One code, two instances on one database: of two redemptions racing,
/// exactly one wins, on every backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_is_redeemed_once_across_instances() {
    for db in TestDb::each().await {
        let s1 = db.open(SDL).await;
        let s2 = db.open(SDL).await;
        let r1 = SqlAuthRepo::new(s1.db().clone());
        let r2 = SqlAuthRepo::new(s2.db().clone());
        for i in 0..5 {
            let id = format!("race{i}");
            r1.insert_code(&code_record(&id, 10_000)).await.unwrap();
            let (a, b) = tokio::join!(r1.use_code(&id, 1), r2.use_code(&id, 1));
            assert!(
                a.unwrap() ^ b.unwrap(),
                "{}: exactly one wins",
                db.backend()
            );
        }
        s1.close().await;
        s2.close().await;
    }
}

/// The internal tables never show up in a migration plan, and a store opened
/// without migrating still gets them on the repository's first use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_tables_stay_out_of_migration_plans() {
    for db in TestDb::each().await {
        let be = db.backend();
        eprintln!("backend: {be}");
        let opts = StoreOptions {
            migrate: false,
            ..StoreOptions::default()
        };
        let raw = db.open_with(SDL, opts.clone()).await.unwrap();
        let repo = SqlAuthRepo::new(raw.db().clone());
        repo.upsert_client(&client("app", 1)).await.unwrap();
        assert!(repo.get_client("app").await.unwrap().is_some(), "{be}");
        raw.close().await;

        let s = db.open(SDL).await;
        let repo = SqlAuthRepo::new(s.db().clone());
        assert!(
            repo.get_client("app").await.unwrap().is_some(),
            "{be}: kept"
        );
        assert!(s.plan().await.unwrap().is_empty(), "{be}");
        s.close().await;

        // A different Model: the plan lists the Model's tables only.
        let other = db
            .open_with(
                "type Query { notes: [Note!]! } type Note { id: ID! text: String }",
                opts,
            )
            .await
            .unwrap();
        let plan = other.plan().await.unwrap();
        assert!(
            plan.iter()
                .all(|step| !step.to_string().contains("_gatehouse")),
            "{be}: {plan:?}"
        );
        other.close().await;
    }
}
