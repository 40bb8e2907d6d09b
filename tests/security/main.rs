//! The security suite: attacks on the real `gatehouse` binary, each a
//! regression test for a hole once found (see `docs/security.md`). The
//! server runs the schema in `tests/security/schema/`: the library's open
//! types linked to types protected by their own scopes (`Secret`, `Vault`),
//! and a root field that needs `admin`.
//!
//! Runs on SQLite always and on PostgreSQL too when
//! `GATEHOUSE_TEST_POSTGRES_URL` is set (required in CI).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod anonymous;
mod cli;
mod connections;
mod cors;
mod identity;
mod input;
mod membership;
mod oidc;
mod owners;
mod paths;
mod policies;
mod requests;
mod scopes;
mod signin;

use gatehouse_testkit::{ServerProcess, TestDb, graphql, password_token, repo_root};
use serde_json::{Value, json};

pub const APP: (&str, &str) = ("app", "app-secret-0123456789abcdef");
pub const DEMO: (&str, &str) = ("demo", "demo-secret-0123456789abcdef");
/// A relying party: the only fixture client registered for the OpenID
/// Connect identity scopes.
pub const RP: (&str, &str) = ("rp", "rp-secret-0123456789abcdef");

/// Users of the fixture: (name, password, scopes).
pub const USERS: &[(&str, &str, &str)] = &[
    ("reader", "reader-password", "read"),
    ("writer", "writer-password", "write"),
    (
        "power",
        "power-password",
        "read write review secret offline_access",
    ),
    ("admin", "admin-password", "read admin"),
    ("alice", "alice-password", "read write memo:draft"),
    ("bob", "bob-password", "read write"),
];

/// Custom claims of the fixture's users (row policies compare them).
pub const CLAIMS: &[(&str, &str)] = &[("alice", "acme"), ("bob", "globex")];

fn config_text(database: &str, extra: &str) -> String {
    let schema = repo_root().join("tests/security/schema");
    let mut users = String::new();
    for (name, password, scopes) in USERS {
        let scopes: Vec<String> = scopes.split(' ').map(|s| format!("\"{s}\"")).collect();
        users.push_str(&format!(
            "[[bootstrap.users]]\nusername = \"{name}\"\npassword = \"{password}\"\nscopes = [{}]\n",
            scopes.join(", ")
        ));
        if let Some((_, org)) = CLAIMS.iter().find(|c| c.0 == *name) {
            users.push_str(&format!("claims = {{ org = \"{org}\" }}\n"));
        }
        users.push('\n');
    }
    format!(
        r#"listen = "127.0.0.1:0"
database = "{database}"
schema = ["{schema}"]
{extra}

[[bootstrap.clients]]
client_id = "{app}"
client_secret = "{app_secret}"
grants = ["password", "client_credentials", "refresh_token",
          "urn:ietf:params:oauth:grant-type:token-exchange"]
scopes = ["read", "write", "review", "secret", "admin", "offline_access", "memo:draft"]

[[bootstrap.clients]]
client_id = "{demo}"
client_secret = "{demo_secret}"
grants = ["password", "refresh_token", "urn:ietf:params:oauth:grant-type:token-exchange"]
scopes = ["read", "write", "offline_access"]
audiences = ["https://reports.example"]

[[bootstrap.clients]]
client_id = "{rp}"
client_secret = "{rp_secret}"
grants = ["password", "client_credentials", "refresh_token"]
scopes = ["read", "write", "openid", "profile", "email"]

{users}"#,
        schema = schema.display(),
        app = APP.0,
        app_secret = APP.1,
        demo = DEMO.0,
        demo_secret = DEMO.1,
        rp = RP.0,
        rp_secret = RP.1,
    )
}

/// A running `gatehouse serve` with the fixture schema and principals.
#[derive(Debug)]
pub struct Server {
    process: ServerProcess,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    pub client: reqwest::Client,
    /// Dropped after the process, which may still hold it open.
    db: TestDb,
}

impl Server {
    /// The binary on a fresh SQLite database; `extra` is config text
    /// (top-level keys first, then sections).
    pub fn start(extra: &str) -> Server {
        Self::start_on(TestDb::sqlite(), extra)
    }

    /// The binary on a new PostgreSQL database; `None` when no PostgreSQL
    /// is configured.
    pub async fn start_postgres(extra: &str) -> Option<Server> {
        Some(Self::start_on(TestDb::postgres().await?, extra))
    }

    /// Both backends: SQLite, then PostgreSQL when configured.
    pub async fn each_backend(extra: &str) -> Vec<Server> {
        let mut out = vec![Server::start(extra)];
        out.extend(Server::start_postgres(extra).await);
        out
    }

    fn start_on(db: TestDb, extra: &str) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("gatehouse.toml");
        std::fs::write(&file, config_text(db.url(), extra)).unwrap();
        let mut cmd = gatehouse_testkit::command(env!("CARGO_BIN_EXE_gatehouse"));
        cmd.arg("serve")
            .arg("--config")
            .arg(&file)
            .current_dir(dir.path())
            .env(
                "GATEHOUSE_SECRET",
                "security-suite-key-encryption-secret-0123456789",
            )
            .env("GATEHOUSE_LOG", "info");
        let process = ServerProcess::start(cmd).with_dir(dir);
        Server {
            base: process.base.clone(),
            process,
            client: reqwest::Client::new(),
            db,
        }
    }

    /// Waits until at least `n` subscriptions listen to the change feed
    /// (`gatehouse_change_feed_receivers`): a change committed from then on
    /// reaches them.
    pub async fn wait_for_feed_receivers(&self, n: u64) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let text = self
                .client
                .get(format!("{}/metrics", self.base))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            let now = text
                .lines()
                .find_map(|l| l.strip_prefix("gatehouse_change_feed_receivers "))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0);
            if now >= n as f64 {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{now} feed receivers after 10 s, wanted {n}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// Every log line so far.
    pub fn logs(&self) -> Vec<String> {
        self.process.logs()
    }

    /// Which backend this server stores in, for assertion messages.
    pub fn backend(&self) -> &'static str {
        self.db.backend()
    }

    /// A password-grant token response for `user` through `client`.
    pub async fn token_response(
        &self,
        client: (&str, &str),
        user: &str,
        scope: Option<&str>,
    ) -> Value {
        let password = USERS.iter().find(|u| u.0 == user).map(|u| u.1).unwrap();
        password_token(&self.client, &self.base, client, (user, password), scope).await
    }

    /// An access token of `user` (all its scopes) through the `app` client.
    pub async fn token(&self, user: &str) -> String {
        self.token_response(APP, user, None).await["access_token"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// A `client_credentials` access token (`read write`) of `client`.
    pub async fn client_token(&self, client: (&str, &str)) -> String {
        let r = self
            .client
            .post(format!("{}/oauth/token", self.base))
            .basic_auth(client.0, Some(client.1))
            .form(&[
                ("grant_type", "client_credentials"),
                ("scope", "read write"),
            ])
            .send()
            .await
            .unwrap();
        let body: Value = r.json().await.unwrap();
        body["access_token"].as_str().unwrap().to_string()
    }

    /// A request to `path` (sent as written: no normalization of its
    /// percent-encoding) with an optional bearer token.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut b = self.client.request(method, format!("{}{path}", self.base));
        if let Some(t) = token {
            b = b.bearer_auth(t);
        }
        b
    }

    /// (status, JSON body or `null`) of a REST call.
    pub async fn rest(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut b = self.request(method, path, token);
        if let Some(body) = body {
            b = b
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        let r = b.send().await.unwrap();
        let status = r.status().as_u16();
        let text = r.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// A GraphQL response (any status).
    pub async fn gql(&self, token: Option<&str>, query: &str, variables: Value) -> Value {
        let url = format!("{}/graphql", self.base);
        graphql(&self.client, &url, token, query, variables).await
    }

    /// `data` of a GraphQL request that must succeed.
    pub async fn data(&self, token: &str, query: &str, variables: Value) -> Value {
        let r = self.gql(Some(token), query, variables).await;
        assert!(r.get("errors").is_none(), "unexpected errors: {r}");
        r["data"].clone()
    }

    /// Rows made with the `power` user: an author, a book linked to a
    /// secret, a vault with a note. Returns their ids.
    pub async fn fixture(&self) -> Fixture {
        let t = self.token("power").await;
        let d = self
            .data(
                &t,
                "mutation { createAuthor(name: \"Ann\") { id } }",
                json!({}),
            )
            .await;
        let author = d["createAuthor"]["id"].as_str().unwrap().to_string();
        let d = self
            .data(
                &t,
                "mutation { createSecret(code: \"s3cr3t\", level: 1) { id } }",
                json!({}),
            )
            .await;
        let secret = d["createSecret"]["id"].as_str().unwrap().to_string();
        let d = self
            .data(
                &t,
                "mutation($i: BookInput!) { createBook(input: $i) { id } }",
                json!({"i": {"title": "Dune", "status": "AVAILABLE", "author": author, "vault": secret}}),
            )
            .await;
        let book = d["createBook"]["id"].as_str().unwrap().to_string();
        let d = self
            .data(
                &t,
                "mutation { createVault(name: \"v\") { id } }",
                json!({}),
            )
            .await;
        let vault = d["createVault"]["id"].as_str().unwrap().to_string();
        let d = self
            .data(
                &t,
                "mutation($v: ID) { createNote(text: \"n\", vault: $v) { id } }",
                json!({"v": vault}),
            )
            .await;
        let note = d["createNote"]["id"].as_str().unwrap().to_string();
        Fixture {
            author,
            book,
            secret,
            vault,
            note,
        }
    }

    /// Everything stored, read with full rights: to compare before and
    /// after an attack.
    pub async fn snapshot(&self) -> Value {
        let t = self.token("power").await;
        self.data(
            &t,
            "{ authors { id name } books { id title year status vault { id } } secrets { id code level } notes { id text } }",
            json!({}),
        )
        .await
    }
}

/// Ids made by [`Server::fixture`].
#[derive(Debug, Clone)]
pub struct Fixture {
    pub author: String,
    pub book: String,
    pub secret: String,
    pub vault: String,
    pub note: String,
}
