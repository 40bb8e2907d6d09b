//! Who a caller is: a client's name never passes for a user's in a row
//! policy, names do not collide across users, clients and consumers (nor
//! with case variants, nor with the names of removed ones), and behind a
//! trusted proxy the client cannot choose its own address.

use gatehouse_testkit::{
    Browser, TestDb, authorize_url, password_token, pkce_challenge, pkce_verifier,
};
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

/// Self-service sign-up on, and a public first-party app to sign up through.
pub(crate) const SIGN_UP: &str = r#"
[auth]
sign_up = true
sign_up_scopes = ["read", "write"]

[[bootstrap.clients]]
client_id = "spa"
public = true
first_party = true
grants = ["authorization_code"]
scopes = ["read", "write"]
redirect_uris = ["https://spa.example/cb"]
"#;

/// Signs up `name` through the sign-up page of `server`; the page after
/// the form (302 with a code on success).
pub(crate) async fn sign_up(
    server: &Server,
    name: &str,
    verifier: &str,
) -> gatehouse_testkit::Page {
    let challenge = pkce_challenge(verifier);
    let url = authorize_url(
        &server.base,
        &[
            ("response_type", "code"),
            ("client_id", "spa"),
            ("redirect_uri", "https://spa.example/cb"),
            ("scope", "read write"),
            ("state", "st"),
            ("code_challenge", &challenge),
            ("code_challenge_method", "S256"),
            ("screen", "sign_up"),
        ],
    );
    let mut browser = Browser::new();
    let form = browser.get(&url).await;
    assert_eq!(form.status, 200, "{}", form.body);
    browser
        .submit(
            &format!("{}/oauth/authorize", server.base),
            &form,
            &[
                ("action", "sign_up"),
                ("username", name),
                ("password", "a long enough password"),
            ],
        )
        .await
}

/// The access token of a sign-up that succeeded.
async fn signed_up_token(
    server: &Server,
    page: &gatehouse_testkit::Page,
    verifier: &str,
) -> String {
    assert_eq!(page.status, 302, "{}: {}", server.backend(), page.body);
    let code = page.redirect_params()["code"].clone();
    let r: Value = server
        .client
        .post(format!("{}/oauth/token", server.base))
        .form(&[
            ("grant_type", "authorization_code"),
            ("client_id", "spa"),
            ("code", code.as_str()),
            ("redirect_uri", "https://spa.example/cb"),
            ("code_verifier", verifier),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    r["access_token"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_string()
}

/// `gatehouse ARGS --database URL` on the server's database, `stdin` its
/// input (a password).
fn cli(server: &Server, args: &[&str], stdin: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = gatehouse_testkit::command(env!("CARGO_BIN_EXE_gatehouse"))
        .args(args)
        .arg("--database")
        .arg(server.db.url())
        .env(
            "GATEHOUSE_SECRET",
            "security-suite-key-encryption-secret-0123456789",
        )
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// A removed user's name is never given to a stranger: with sign-up on,
/// dave signs up and writes a private memo, an operator removes dave, and
/// a stranger signing up as `dave` (or `DAVE`) is refused, as is `user
/// add dave`: a `sub` is never reassigned (OpenID Connect Core §2), so
/// the memo never becomes the stranger's.
#[tokio::test]
async fn a_removed_users_name_is_never_given_to_someone_else() {
    for s in Server::each_backend(SIGN_UP).await {
        let b = s.backend();
        let verifier = pkce_verifier("dave");
        let page = sign_up(&s, "dave", &verifier).await;
        let dave = signed_up_token(&s, &page, &verifier).await;
        let d = s
            .data(
                &dave,
                "mutation { createMemo(title: \"dave's\", published: false) { id owner } }",
                json!({}),
            )
            .await;
        assert_eq!(d["createMemo"]["owner"], "dave", "{b}");

        let o = cli(&s, &["user", "remove", "dave"], "");
        assert!(
            o.status.success(),
            "{b}: {}",
            String::from_utf8_lossy(&o.stderr)
        );

        for name in ["dave", "DAVE", "Dave"] {
            let page = sign_up(&s, name, &verifier).await;
            assert_eq!(page.status, 400, "{b}: {name}: {}", page.body);
            assert!(
                page.body.contains("not available"),
                "{b}: {name}: {}",
                page.body
            );
        }
        let o = cli(&s, &["user", "add", "dave"], "another password\n");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{b}: {err}");
        assert!(
            err.contains("\"dave\"") && err.contains("removed"),
            "{b}: {err}"
        );
        // Nor as a client.
        let o = cli(
            &s,
            &["client", "add", "Dave", "--grants", "client_credentials"],
            "",
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains("removed"), "{b}: {err}");
    }
}

/// Names are unique without regard to case (a variant of a user's, a
/// client's or the built-in GraphiQL client's name is refused) and drawn
/// from a documented set: no `:` (unusable with HTTP Basic), no leading
/// `$` (a policy variable's spelling).
#[tokio::test]
async fn names_are_unique_without_regard_to_case_and_from_a_set() {
    let s = Server::start(SIGN_UP);
    let verifier = pkce_verifier("names");
    for (name, needle) in [
        ("ALICE", "not available"),
        ("Reader", "not available"),
        ("APP", "not available"),
        ("GraphiQL", "not available"),
        ("eve:x", "letters, digits"),
        ("$sub", "letters, digits"),
        ("has space", "letters, digits"),
    ] {
        let page = sign_up(&s, name, &verifier).await;
        assert_eq!(page.status, 400, "{name}: {}", page.body);
        assert!(page.body.contains(needle), "{name}: {}", page.body);
    }
    for (args, needle) in [
        (
            vec!["user", "add", "Alice"],
            "unique without regard to case",
        ),
        (vec!["user", "add", "bob:x"], "letters, digits"),
        (vec!["user", "add", "$org"], "letters, digits"),
        (
            vec![
                "client",
                "add",
                "GRAPHIQL",
                "--grants",
                "client_credentials",
            ],
            "GraphiQL",
        ),
        (vec!["consumer", "add", "Rp"], "already taken"),
    ] {
        let o = cli(&s, &args, "a password\n");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    // A name from the set, in any case not yet taken, signs up.
    let page = sign_up(&s, "Eve.Smith@example.com", &verifier).await;
    signed_up_token(&s, &page, &verifier).await;
}
