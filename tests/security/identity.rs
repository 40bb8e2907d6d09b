//! Who a caller is: a client's name never passes for a user's in a row
//! policy, names do not collide across users, clients and consumers, and
//! behind a trusted proxy the client cannot choose its own address.

use gatehouse_testkit::{TestDb, password_token};
use serde_json::{Value, json};

use crate::{APP, Server, config_text};

fn code(r: &Value) -> &str {
    r["errors"][0]["extensions"]["code"].as_str().unwrap_or("")
}

/// A client named like the owner of rows (a user removed since, or rows
/// written by an operator) gets a token whose `sub` is that name; it must
/// not pass the owner-only policies on those rows.
const CAROL: &str = r#"
[[bootstrap.clients]]
client_id = "carol"
client_secret = "carol-secret-0123456789abcdef"
grants = ["client_credentials"]
scopes = ["read", "write"]

[[bootstrap.users]]
username = "root"
password = "root-password"
scopes = ["read", "write", "admin"]
"#;

#[tokio::test]
async fn a_client_token_never_passes_an_owner_policy_on_sub() {
    for s in Server::each_backend(CAROL).await {
        let b = s.backend();
        // `root` holds the bypass scope: it writes a private memo of "carol".
        let root = password_token(&s.client, &s.base, APP, ("root", "root-password"), None)
            .await["access_token"]
            .as_str()
            .unwrap()
            .to_string();
        let d = s
            .data(
                &root,
                "mutation { createMemo(title: \"carol's\", published: false, owner: \"carol\") { id owner } }",
                json!({}),
            )
            .await;
        let id = d["createMemo"]["id"].as_str().unwrap().to_string();
        assert_eq!(d["createMemo"]["owner"], "carol", "{b}");

        let cc = s
            .client_token(("carol", "carol-secret-0123456789abcdef"))
            .await;
        // The token says it is a client's own.
        let i: Value = s
            .client
            .post(format!("{}/oauth/introspect", s.base))
            .basic_auth(APP.0, Some(APP.1))
            .form(&[("token", cc.as_str())])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            (&i["sub"], &i["idtyp"]),
            (&json!("carol"), &json!("app")),
            "{b}: {i}"
        );

        // Not readable: lists, lookups, REST items and counts.
        let d = s.data(&cc, "{ memos { id } }", json!({})).await;
        assert_eq!(d["memos"], json!([]), "{b}");
        let d = s
            .data(
                &cc,
                "query($i: ID!) { memo(id: $i) { id } }",
                json!({"i": id}),
            )
            .await;
        assert_eq!(d["memo"], Value::Null, "{b}");
        let (st, _) = s
            .rest("GET", &format!("/v1/memos/{id}"), Some(&cc), None)
            .await;
        assert_eq!(st, 404, "{b}");
        // Not writable, in GraphQL or REST.
        let r = s
            .gql(
                Some(&cc),
                "mutation($i: ID!) { updateMemo(id: $i, patch: {published: true}) { id } }",
                json!({"i": id}),
            )
            .await;
        assert_eq!(code(&r), "NOT_FOUND", "{b}: {r}");
        let (st, _) = s
            .rest("DELETE", &format!("/v1/memos/{id}"), Some(&cc), None)
            .await;
        assert_eq!(st, 404, "{b}");
        // And it cannot create rows owned by "carol" either: `$sub` is a user's.
        let r = s
            .gql(
                Some(&cc),
                "mutation { createMemo(title: \"x\", published: false) { id owner } }",
                json!({}),
            )
            .await;
        assert_eq!(code(&r), "FORBIDDEN", "{b}: {r}");
        let d = s.data(&root, "{ memos { id title } }", json!({})).await;
        assert_eq!(d["memos"].as_array().map(Vec::len), Some(1), "{b}: {d}");
    }
}

/// `[[bootstrap.clients]]` with the name of a user (and a consumer with a
/// user's name) stops the start with a message naming the clash (whichever
/// of the two is registered first).
#[tokio::test]
async fn a_name_held_by_another_kind_of_identity_is_refused_at_bootstrap() {
    for (extra, needle) in [
        (
            "[[bootstrap.clients]]\nclient_id = \"bob\"\nclient_secret = \"bob-client-secret\"\n\
             grants = [\"client_credentials\"]\nscopes = [\"read\", \"write\"]\n",
            "\"bob\" is already taken by a",
        ),
        (
            "[[bootstrap.consumers]]\nkey = \"alice\"\nsecret = \"alice-consumer-secret\"\n",
            "\"alice\" is already taken by a",
        ),
    ] {
        let db = TestDb::sqlite();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("gatehouse.toml");
        std::fs::write(&file, config_text(db.url(), extra)).unwrap();
        let o = gatehouse_testkit::command(env!("CARGO_BIN_EXE_gatehouse"))
            .arg("serve")
            .arg("--config")
            .arg(&file)
            .current_dir(dir.path())
            .env(
                "GATEHOUSE_SECRET",
                "security-suite-key-encryption-secret-0123456789",
            )
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_ne!(o.status.code(), Some(0), "{err}");
        assert!(err.contains(needle), "{needle}: {err}");
    }
}

/// Behind a trusted proxy that appends `X-Forwarded-For`, a client-written
/// `Forwarded` header is not read: rotating it does not reset the
/// failed-login throttle. With `forwarded_header = "Forwarded"`, the other
/// way round.
#[tokio::test]
async fn a_client_written_forwarding_header_does_not_reset_the_login_throttle() {
    for (extra, fixed, rotated) in [
        ("", "x-forwarded-for", "forwarded"),
        (
            "forwarded_header = \"Forwarded\"\n",
            "forwarded",
            "x-forwarded-for",
        ),
    ] {
        let s = Server::start(&format!(
            "trusted_proxies = [\"127.0.0.0/8\", \"::1\"]\n{extra}"
        ));
        let mut statuses = Vec::new();
        for i in 0..12 {
            let fixed_value = match fixed {
                "forwarded" => "for=198.51.100.7".to_string(),
                _ => "198.51.100.7".to_string(),
            };
            let rotated_value = match rotated {
                "forwarded" => format!("for=203.0.113.{i}"),
                _ => format!("203.0.113.{i}"),
            };
            let r = s
                .client
                .post(format!("{}/oauth/token", s.base))
                .basic_auth(APP.0, Some(APP.1))
                .header(fixed, fixed_value)
                .header(rotated, rotated_value)
                .form(&[
                    ("grant_type", "password"),
                    ("username", "alice"),
                    ("password", "wrong"),
                ])
                .send()
                .await
                .unwrap();
            statuses.push(r.status().as_u16());
        }
        assert!(
            statuses.contains(&429),
            "{fixed} read, {rotated} ignored: {statuses:?}"
        );
    }
}
