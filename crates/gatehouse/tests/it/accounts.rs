//! Accounts as rows of the `@account` type, through the real binary: the
//! CLI, sign-in, tokens, userinfo and GraphQL all read the same rows; a
//! change of a claim, a disabled account or a removal reaches the tokens
//! already issued; users from before the account type keep their `sub`.

use std::io::Write;
use std::path::Path;
use std::process::{Output, Stdio};

use serde_json::{Value, json};

use gatehouse_testkit::password_token;

use crate::{bin, serve, stderr, stdout};

const TYPES: &str = r#"
type Note @policy(all: {owner: "$sub"}) {
  id: ID!
  owner: User! @relation(onDelete: CASCADE)
  text: String!
}
"#;

const ACCOUNT: &str = r#"
type User @account @policy(read: {id: "$sub"}, bypass: "admin") {
  id: ID!
  username: String! @unique
  email: String @unique
  emailVerified: Boolean!
  displayName: String @default(value: "A reader")
  disabled: Boolean
  org: String @claim
  level: Int @claim(name: "lvl")
  notes: [Note!]!
}
"#;

/// Before the account type: users live in the server's tables only.
const BEFORE: &str = "type Tag { id: ID! name: String! }";

const SCOPES: &str = "read write openid profile email";

const CONFIG: &str = r#"
database = "sqlite://data/t.db"
schema = ["schema"]

[tokens]
status_cache_ttl = "0s"

[auth]
sign_up = true
sign_up_scopes = ["read", "write", "openid", "profile", "email"]

[[bootstrap.clients]]
client_id = "app"
client_secret = "app-secret-0123456789"
grants = ["password", "refresh_token"]
scopes = ["openid", "profile", "email", "read", "write", "admin"]
"#;

struct Project {
    dir: tempfile::TempDir,
}

impl Project {
    fn new(schema: &str) -> Project {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("schema")).unwrap();
        std::fs::write(dir.path().join("gatehouse.toml"), CONFIG).unwrap();
        let p = Project { dir };
        p.schema(schema);
        p
    }

    fn schema(&self, text: &str) {
        std::fs::write(self.dir.path().join("schema/types.graphql"), text).unwrap();
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `gatehouse ARGS --config gatehouse.toml`, with `stdin` typed in.
    fn run(&self, args: &[&str], stdin: &str) -> Output {
        let mut child = bin()
            .args(args)
            .args(["--config", "gatehouse.toml"])
            .current_dir(self.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
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

    fn json(&self, args: &[&str], stdin: &str) -> Value {
        let o = self.run(args, stdin);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)))
    }
}

/// The payload of a JWT, unverified (the server checks it; the test reads it).
fn payload(jwt: &str) -> Value {
    use base64::Engine;
    let part = jwt.split('.').nth(1).unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

async fn token(c: &reqwest::Client, base: &str, user: &str, password: &str, scope: &str) -> Value {
    password_token(
        c,
        base,
        ("app", "app-secret-0123456789"),
        (user, password),
        Some(scope),
    )
    .await
}

async fn gql(c: &reqwest::Client, base: &str, token: &str, q: &str) -> Value {
    gatehouse_testkit::graphql(c, &format!("{base}/graphql"), Some(token), q, json!({})).await
}

#[tokio::test(flavor = "multi_thread")]
async fn accounts_are_rows_that_sign_in_and_their_changes_reach_issued_tokens() {
    let p = Project::new(&format!("{ACCOUNT}{TYPES}"));
    let alice = p.json(
        &[
            "user", "add", "alice", "--claim", "org=acme", "--claim", "lvl=2", "--json",
            "--scopes", SCOPES,
        ],
        "alice-password\n",
    );
    let sub = alice["sub"].as_str().unwrap().to_string();
    assert_ne!(sub, "alice", "a new account's sub is its row id: {alice}");
    assert_eq!(alice["claims"], json!({"org": "acme", "lvl": 2}), "{alice}");
    let o = p.run(
        &["user", "add", "bob", "--claim", "team=x"],
        "bob-password\n",
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no `@claim` field for the claim \"team\""),
        "{}",
        stderr(&o)
    );

    let server = serve(
        p.path(),
        &["--config", "gatehouse.toml", "--listen", "127.0.0.1:0"],
        &[("GATEHOUSE_SECRET", "accounts-test-secret-0123456789")],
    );
    let (c, base) = (reqwest::Client::new(), server.base.clone());

    // Signing in by the row's username: the token's sub is the row's id,
    // its claims the row's `@claim` fields.
    let t = token(
        &c,
        &base,
        "alice",
        "alice-password",
        "openid profile email read write",
    )
    .await;
    let access = t["access_token"]
        .as_str()
        .unwrap_or_else(|| panic!("{t}"))
        .to_string();
    let claims = payload(&access);
    assert_eq!(claims["sub"], json!(sub));
    assert_eq!(
        (&claims["org"], &claims["lvl"]),
        (&json!("acme"), &json!(2))
    );
    let id = payload(t["id_token"].as_str().unwrap());
    assert_eq!(id["preferred_username"], json!("alice"));
    assert_eq!(id["name"], json!("A reader"), "{id}");

    // The account is a row like any other, under its policy; owner fields
    // reference it.
    let r = gql(
        &c,
        &base,
        &access,
        "{ users { id username emailVerified } }",
    )
    .await;
    assert_eq!(
        r["data"]["users"],
        json!([{"id": sub, "username": "alice", "emailVerified": false}]),
        "{r}"
    );
    let r = gql(
        &c,
        &base,
        &access,
        &format!("mutation {{ createNote(input: {{owner: \"{sub}\", text: \"hello\"}}) {{ owner {{ username }} }} }}"),
    )
    .await;
    assert_eq!(
        r["data"]["createNote"]["owner"]["username"],
        json!("alice"),
        "{r}"
    );
    let r = gql(
        &c,
        &base,
        &access,
        "mutation { updateUser(id: \"x\", input: {emailVerified: true}) { id } }",
    )
    .await;
    assert!(r["errors"].is_array(), "emailVerified is in no input: {r}");

    // Userinfo reads the row at request time.
    let info: Value = c
        .get(format!("{base}/oauth/userinfo"))
        .bearer_auth(&access)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(info["sub"], json!(sub));
    assert_eq!(info["preferred_username"], json!("alice"));
    assert_eq!(info["name"], json!("A reader"), "{info}");
    assert_eq!(info["org"], json!("acme"));

    // A claim changed elsewhere (here the CLI, another process) revokes
    // the access tokens carrying the old value; the refresh token gets a
    // new one with the new value.
    p.json(&["user", "set-claims", "alice", "org=globex", "--json"], "");
    let r = gql(&c, &base, &access, "{ users { id } }").await;
    assert_eq!(
        r["errors"][0]["extensions"]["code"],
        json!("UNAUTHENTICATED"),
        "{r}"
    );
    let refreshed: Value = c
        .post(format!("{base}/oauth/token"))
        .basic_auth("app", Some("app-secret-0123456789"))
        .form(&[
            ("grant_type", "refresh_token"),
            (
                "refresh_token",
                t["refresh_token"].as_str().unwrap_or_default(),
            ),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let fresh = refreshed["access_token"]
        .as_str()
        .unwrap_or_else(|| panic!("{refreshed}"));
    assert_eq!(payload(fresh)["org"], json!("globex"));

    // An admin (a bypass caller) disables an account over GraphQL: its
    // tokens stop working at once and it cannot sign in again.
    p.json(
        &[
            "user",
            "add",
            "root",
            "--json",
            "--scopes",
            "admin read write",
        ],
        "root-password\n",
    );
    p.json(
        &["user", "add", "bob", "--json", "--scopes", SCOPES],
        "bob-password\n",
    );
    let root = token(&c, &base, "root", "root-password", "admin read write").await;
    let root = root["access_token"]
        .as_str()
        .unwrap_or_else(|| panic!("{root}"))
        .to_string();
    let bob = token(&c, &base, "bob", "bob-password", "read").await;
    let bob_access = bob["access_token"].as_str().unwrap().to_string();
    let bob_sub = payload(&bob_access)["sub"].as_str().unwrap().to_string();
    let r = gql(
        &c,
        &base,
        &root,
        &format!(
            "mutation {{ updateUser(id: \"{bob_sub}\", input: {{disabled: true}}) {{ disabled }} }}"
        ),
    )
    .await;
    assert_eq!(r["data"]["updateUser"]["disabled"], json!(true), "{r}");
    let r = gql(&c, &base, &bob_access, "{ notes { text } }").await;
    assert_eq!(
        r["errors"][0]["extensions"]["code"],
        json!("UNAUTHENTICATED"),
        "{r}"
    );
    let again: Value = c
        .post(format!("{base}/oauth/token"))
        .basic_auth("app", Some("app-secret-0123456789"))
        .form(&[
            ("grant_type", "password"),
            ("username", "bob"),
            ("password", "bob-password"),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(again["error"], json!("invalid_grant"), "{again}");

    // An account an admin creates over GraphQL has no password, so it
    // cannot sign in, until `user passwd` gives it one (and the sign-up
    // scopes).
    let r = gql(
        &c,
        &base,
        &root,
        "mutation { createUser(input: {username: \"erin\"}) { id username } }",
    )
    .await;
    let erin = r["data"]["createUser"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_string();
    let o = p.run(&["user", "passwd", "erin"], "erin-password-0\n");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let t = token(&c, &base, "erin", "erin-password-0", "read write").await;
    let claims = payload(t["access_token"].as_str().unwrap_or_else(|| panic!("{t}")));
    assert_eq!(
        (&claims["sub"], &claims["scope"]),
        (&json!(erin), &json!("read write"))
    );

    // A removed account's tokens stop working, and the next account of
    // that name is another row: it reads nothing of the first one's.
    let t = token(&c, &base, "alice", "alice-password", "read write").await;
    let access = t["access_token"].as_str().unwrap().to_string();
    let o = p.run(&["user", "remove", "alice"], "");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r = gql(&c, &base, &access, "{ notes { text } }").await;
    assert_eq!(
        r["errors"][0]["extensions"]["code"],
        json!("UNAUTHENTICATED"),
        "{r}"
    );
    let again = p.json(
        &["user", "add", "alice", "--json", "--scopes", SCOPES],
        "another-password\n",
    );
    assert_ne!(again["sub"], json!(sub));
    let t = token(&c, &base, "alice", "another-password", "read write").await;
    let r = gql(
        &c,
        &base,
        t["access_token"].as_str().unwrap(),
        "{ notes { text } }",
    )
    .await;
    assert_eq!(r["data"]["notes"], json!([]), "{r}");
}

#[tokio::test(flavor = "multi_thread")]
async fn users_from_before_the_account_type_keep_their_sub_and_their_rows() {
    let p = Project::new(BEFORE);
    p.json(
        &["user", "add", "dave", "--claim", "org=acme", "--json"],
        "dave-password\n",
    );
    let list = p.json(&["user", "list", "--json"], "");
    assert_eq!(list[0]["sub"], json!("dave"));

    p.schema(&format!(
        "{}{BEFORE}",
        ACCOUNT.replace("  notes: [Note!]!\n", "")
    ));
    // dave becomes a row whose id is his old name: his tokens and the
    // owner values naming him stay valid.
    let list = p.json(&["user", "list", "--json"], "");
    assert_eq!(list[0]["username"], json!("dave"), "{list}");
    assert_eq!(list[0]["sub"], json!("dave"), "{list}");
    assert_eq!(list[0]["claims"], json!({"org": "acme"}), "{list}");

    let server = serve(
        p.path(),
        &["--config", "gatehouse.toml", "--listen", "127.0.0.1:0"],
        &[("GATEHOUSE_SECRET", "accounts-test-secret-0123456789")],
    );
    let c = reqwest::Client::new();
    let t = token(&c, &server.base, "dave", "dave-password", "read").await;
    let claims = payload(t["access_token"].as_str().unwrap_or_else(|| panic!("{t}")));
    assert_eq!(
        (&claims["sub"], &claims["org"]),
        (&json!("dave"), &json!("acme"))
    );
}

#[test]
fn sign_up_is_refused_at_start_when_it_cannot_fill_a_required_field() {
    let p = Project::new(&format!(
        "{}{TYPES}",
        ACCOUNT.replace(
            "displayName: String @default(value: \"A reader\")",
            "displayName: String!"
        )
    ));
    let o = p.run(&["serve", "--listen", "127.0.0.1:0"], "");
    assert_ne!(o.status.code(), Some(0));
    assert!(
        stderr(&o).contains("cannot fill the account type's required field(s) `displayName`"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn required_verification_is_refused_at_start_without_the_fields_it_needs() {
    let p = Project::new(&format!(
        "{}{TYPES}",
        ACCOUNT.replace("emailVerified: Boolean!\n", "")
    ));
    std::fs::write(
        p.path().join("gatehouse.toml"),
        format!("{CONFIG}\n[auth.email]\nverification = \"required\"\n"),
    )
    .unwrap();
    let o = p.run(&["serve", "--listen", "127.0.0.1:0"], "");
    assert_ne!(o.status.code(), Some(0));
    assert!(
        stderr(&o).contains("`[auth.email] verification = \"required\"` needs an `@account` type with the field(s) `emailVerified`"),
        "{}",
        stderr(&o)
    );

    // Without an account type, both fields are missing.
    let p = Project::new(BEFORE);
    std::fs::write(
        p.path().join("gatehouse.toml"),
        format!("{CONFIG}\n[auth.email]\nverification = \"required\"\n"),
    )
    .unwrap();
    let o = p.run(&["serve", "--listen", "127.0.0.1:0"], "");
    assert_ne!(o.status.code(), Some(0));
    assert!(
        stderr(&o).contains("field(s) `email`, `emailVerified`"),
        "{}",
        stderr(&o)
    );
}
