//! The e-mail flows (verification at sign-up, password reset) through the
//! real binary, on SQLite and PostgreSQL, with the `file` e-mail transport:
//! messages are read from the directory the server writes them to. One
//! test sends over SMTP to an in-process server that is down at first.

use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use gatehouse_testkit::{
    Browser as Tab, Page, ServerProcess, TestDb, authorize_url, password_token, pkce_challenge,
    pkce_verifier, sign_in_for_code,
};

use crate::{bin, serve, stderr};

const SCHEMA: &str = r#"
type User @account @policy(read: {id: "$sub"}, update: {id: "$sub"}, bypass: "admin") {
  id: ID!
  username: String! @unique
  email: String @unique
  emailVerified: Boolean!
}
"#;

const SECRET: &str = "mailflows-test-secret-0123456789";

fn config(extra: &str) -> String {
    format!(
        r#"
schema = ["schema"]

[tokens]
status_cache_ttl = "0s"

[email]
transport = "file"
url = "mail"
from = "Gatehouse <no-reply@example.com>"

[auth]
sign_up_scopes = ["read", "openid"]
{extra}

[[bootstrap.clients]]
client_id = "app"
client_secret = "app-secret-0123456789"
grants = ["password", "refresh_token"]
scopes = ["openid", "read", "write", "admin"]

[[bootstrap.clients]]
client_id = "web"
public = true
first_party = true
grants = ["authorization_code"]
scopes = ["openid", "read"]
redirect_uris = ["http://127.0.0.1/callback"]
"#
    )
}

/// A project directory on one database, with `alice` and `carol` whose
/// addresses are set, and a server.
struct Project {
    dir: tempfile::TempDir,
    db: TestDb,
    server: Option<ServerProcess>,
    /// Where the `file` transport writes.
    mail: PathBuf,
}

impl Project {
    async fn start(db: TestDb, extra: &str) -> Project {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("schema")).unwrap();
        std::fs::write(dir.path().join("schema/types.graphql"), SCHEMA).unwrap();
        std::fs::write(dir.path().join("gatehouse.toml"), config(extra)).unwrap();
        let mail = dir.path().join("mail");
        let mut p = Project {
            dir,
            db,
            server: None,
            mail,
        };
        p.cli(
            &["user", "add", "root", "--scopes", "admin read write"],
            "root-password-0001\n",
        );
        for name in ["alice", "carol"] {
            p.cli(
                &["user", "add", name, "--scopes", "read openid"],
                &format!("{name}-old-password\n"),
            );
        }
        p.server = Some(serve(
            p.dir.path(),
            &["--config", "gatehouse.toml", "--listen", "127.0.0.1:0"],
            &[
                ("GATEHOUSE_DATABASE", p.db.url()),
                ("GATEHOUSE_SECRET", SECRET),
            ],
        ));
        let root = p
            .token("root", "root-password-0001", "admin read write")
            .await;
        for name in ["alice", "carol"] {
            let sub = p.sub(name).await;
            let r = reqwest::Client::new()
                .patch(format!("{}/v1/users/{sub}", p.base()))
                .bearer_auth(&root)
                .json(&json!({ "email": format!("{name}@example.com") }))
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success(), "{}", r.text().await.unwrap());
        }
        p
    }

    fn cli(&self, args: &[&str], stdin: &str) {
        let mut child = bin()
            .args(args)
            .args(["--config", "gatehouse.toml"])
            .env("GATEHOUSE_DATABASE", self.db.url())
            .env("GATEHOUSE_SECRET", SECRET)
            .current_dir(self.dir.path())
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
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
    }

    fn base(&self) -> String {
        self.server.as_ref().unwrap().base.clone()
    }

    async fn token(&self, user: &str, password: &str, scope: &str) -> String {
        let t = password_token(
            &reqwest::Client::new(),
            &self.base(),
            ("app", "app-secret-0123456789"),
            (user, password),
            Some(scope),
        )
        .await;
        t["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("{user} cannot sign in: {t}"))
            .to_string()
    }

    async fn can_sign_in(&self, user: &str, password: &str) -> bool {
        let r = reqwest::Client::new()
            .post(format!("{}/oauth/token", self.base()))
            .basic_auth("app", Some("app-secret-0123456789"))
            .form(&[
                ("grant_type", "password"),
                ("username", user),
                ("password", password),
            ])
            .send()
            .await
            .unwrap();
        r.status().is_success()
    }

    async fn sub(&self, user: &str) -> String {
        let t = self
            .token(user, &format!("{user}-old-password"), "read")
            .await;
        gatehouse_testkit::jwt_payload(&t)["sub"]
            .as_str()
            .unwrap()
            .to_string()
    }

    async fn verified(&self, user: &str, password: &str) -> Value {
        let t = self.token(user, password, "read").await;
        let r = gatehouse_testkit::graphql(
            &reqwest::Client::new(),
            &format!("{}/graphql", self.base()),
            Some(&t),
            "{ users { emailVerified } }",
            json!({}),
        )
        .await;
        r["data"]["users"][0]["emailVerified"].clone()
    }

    fn mail_dir(&self) -> PathBuf {
        self.mail.clone()
    }

    /// The messages written so far, as decoded text.
    fn messages(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.mail_dir()) else {
            return Vec::new();
        };
        // Only whole messages: the transport writes a file under another
        // name, then renames it.
        let mut files: Vec<_> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|f| f.extension().is_some_and(|x| x == "eml"))
            .collect();
        files.sort();
        files
            .iter()
            .filter_map(|f| std::fs::read_to_string(f).ok())
            .map(|text| decode(&text))
            .collect()
    }

    /// The messages to `to`, waiting (up to 10 s) until there are `n`.
    async fn mail_to(&self, to: &str, n: usize) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let found: Vec<String> = self
                .messages()
                .into_iter()
                .filter(|m| m.contains(&format!("To: {to}")))
                .collect();
            if found.len() >= n || Instant::now() > deadline {
                if found.len() < n {
                    eprintln!("server log: {:#?}", self.server.as_ref().unwrap().logs());
                }
                return found;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The text of an `.eml` file with its quoted-printable body decoded.
fn decode(eml: &str) -> String {
    let eml = eml.replace("\r\n", "\n");
    if !eml.contains("quoted-printable") {
        return eml;
    }
    let joined = eml.replace("=\n", "");
    let mut out = String::new();
    let mut chars = joined.chars();
    while let Some(c) = chars.next() {
        if c == '=' {
            let hex: String = chars.by_ref().take(2).collect();
            match u8::from_str_radix(&hex, 16) {
                Ok(b) => out.push(char::from(b)),
                Err(_) => {
                    out.push('=');
                    out.push_str(&hex);
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The link and the code a message carries.
fn link_and_code(message: &str) -> (String, String) {
    let link = message
        .split_whitespace()
        .find(|w| w.contains("/auth/reset?token="))
        .unwrap_or_else(|| panic!("no link in {message}"))
        .to_string();
    let code = message
        .split_whitespace()
        .find(|w| w.len() == 8 && w.bytes().all(|b| b.is_ascii_digit()))
        .unwrap_or_else(|| panic!("no code in {message}"))
        .to_string();
    (link, code)
}

/// A browser on the flow's pages: its CSRF cookie and the last page's field.
struct Browser {
    c: reqwest::Client,
    cookie: String,
    csrf: String,
}

fn hidden_value(page: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = page
        .find(&marker)
        .unwrap_or_else(|| panic!("no field {name} in {page}"))
        + marker.len();
    page[start..].split('"').next().unwrap().to_string()
}

impl Browser {
    /// Opens `url` (a page with a form) and keeps its cookie and field.
    async fn open(url: &str) -> (Browser, reqwest::StatusCode, String) {
        let c = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let r = c.get(url).send().await.unwrap();
        let status = r.status();
        let cookie = r
            .headers()
            .get("set-cookie")
            .map(|v| v.to_str().unwrap().split(';').next().unwrap().to_string())
            .unwrap_or_default();
        let page = r.text().await.unwrap();
        let csrf = if page.contains("name=\"csrf\"") {
            hidden_value(&page, "csrf")
        } else {
            String::new()
        };
        (Browser { c, cookie, csrf }, status, page)
    }

    async fn post(&self, url: &str, fields: &[(&str, &str)]) -> (reqwest::StatusCode, String) {
        self.post_with(url, fields, None).await
    }

    async fn post_with(
        &self,
        url: &str,
        fields: &[(&str, &str)],
        host: Option<&str>,
    ) -> (reqwest::StatusCode, String) {
        let mut form: Vec<(&str, &str)> = vec![("csrf", &self.csrf)];
        form.extend_from_slice(fields);
        let mut req = self.c.post(url).header("cookie", &self.cookie).form(&form);
        if let Some(h) = host {
            req = req.header("host", h);
        }
        let r = req.send().await.unwrap();
        let status = r.status();
        (status, r.text().await.unwrap())
    }
}

/// Asks for a reset of `address`; the "check your e-mail" page's status,
/// text and flow id.
async fn forgot(p: &Project, address: &str) -> (reqwest::StatusCode, String, String) {
    let (b, status, _) = Browser::open(&format!("{}/auth/forgot", p.base())).await;
    assert_eq!(status, 200);
    let (status, page) = b
        .post(&format!("{}/auth/forgot", p.base()), &[("email", address)])
        .await;
    let flow = hidden_value(&page, "flow");
    (status, page, flow)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forgotten_password_is_reset_by_its_link_which_scanners_cannot_spend() {
    for db in TestDb::each().await {
        let p = Project::start(db, "").await;
        let old = p.token("alice", "alice-old-password", "read").await;

        // Asked with a forged Host header, the message still names the issuer.
        let (b, _, _) = Browser::open(&format!("{}/auth/forgot", p.base())).await;
        let (status, page) = b
            .post_with(
                &format!("{}/auth/forgot", p.base()),
                &[("email", "Alice@Example.com")],
                Some("evil.example"),
            )
            .await;
        assert_eq!(status, 200, "{page}");
        assert!(page.contains("Check your e-mail"), "{page}");
        let mail = p.mail_to("alice@example.com", 1).await;
        assert_eq!(mail.len(), 1, "one message for alice: {mail:?}");
        let (link, _) = link_and_code(&mail[0]);
        assert!(
            link.starts_with(&format!("{}/auth/reset?token=", p.base())),
            "{link}"
        );
        assert!(!mail[0].contains("evil.example"));

        // A scanner opens the link (GET and HEAD): nothing is spent.
        let c = reqwest::Client::new();
        assert_eq!(c.head(&link).send().await.unwrap().status(), 200);
        assert_eq!(c.get(&link).send().await.unwrap().status(), 200);
        let (b, status, page) = Browser::open(&link).await;
        assert_eq!(status, 200);
        assert!(page.contains("Choose a new password"), "{page}");
        let token = hidden_value(&page, "token");

        // A short password is refused and spends nothing either.
        let reset = format!("{}/auth/reset", p.base());
        let (status, _) = b
            .post(&reset, &[("token", &token), ("password", "short")])
            .await;
        assert_eq!(status, 400);
        let (status, page) = b
            .post(
                &reset,
                &[("token", &token), ("password", "alice-new-password")],
            )
            .await;
        assert_eq!(status, 200, "{page}");
        assert!(page.contains("Your password was changed"), "{page}");

        // The new password signs in, the old one does not, the old tokens
        // are revoked, and the address is verified.
        assert!(p.can_sign_in("alice", "alice-new-password").await);
        assert!(!p.can_sign_in("alice", "alice-old-password").await);
        let r = c
            .get(format!("{}/v1/users", p.base()))
            .bearer_auth(&old)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "the old access token is revoked");
        assert_eq!(p.verified("alice", "alice-new-password").await, json!(true));

        // The link is spent.
        let (status, _) = b
            .post(
                &reset,
                &[("token", &token), ("password", "another-password-1")],
            )
            .await;
        assert_eq!(status, 400);
        assert_eq!(c.get(&link).send().await.unwrap().status(), 400);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_code_sets_the_password_once_and_five_wrong_guesses_kill_it_and_its_link() {
    for db in TestDb::each().await {
        let p = Project::start(db, "").await;
        let reset = format!("{}/auth/reset", p.base());

        // Alice types her code on the page she asked from.
        let (b, _, _) = Browser::open(&format!("{}/auth/forgot", p.base())).await;
        let (_, page) = b
            .post(
                &format!("{}/auth/forgot", p.base()),
                &[("email", "alice@example.com")],
            )
            .await;
        let flow = hidden_value(&page, "flow");
        let (_, code) = link_and_code(&p.mail_to("alice@example.com", 1).await[0]);
        let (status, page) = b
            .post(
                &reset,
                &[
                    ("flow", &flow),
                    ("code", &code),
                    ("password", "alice-new-password"),
                ],
            )
            .await;
        assert_eq!(status, 200, "{page}");
        assert!(p.can_sign_in("alice", "alice-new-password").await);
        let (status, _) = b
            .post(
                &reset,
                &[
                    ("flow", &flow),
                    ("code", &code),
                    ("password", "alice-third-password"),
                ],
            )
            .await;
        assert_eq!(status, 400, "a code works once");

        // Carol's code does not work on Alice's page.
        let (_, _, carol_flow) = forgot(&p, "carol@example.com").await;
        let carol_mail = p.mail_to("carol@example.com", 1).await;
        let (carol_link, carol_code) = link_and_code(&carol_mail[0]);
        let (_, alice_page) = b
            .post(
                &format!("{}/auth/forgot", p.base()),
                &[("email", "alice@example.com")],
            )
            .await;
        let alice_flow = hidden_value(&alice_page, "flow");
        let (status, _) = b
            .post(
                &reset,
                &[
                    ("flow", &alice_flow),
                    ("code", &carol_code),
                    ("password", "stolen-password-1"),
                ],
            )
            .await;
        assert_eq!(status, 400, "a code is bound to its own flow");

        // Five wrong codes on Carol's flow: her right code and her link are dead.
        for guess in ["00000000", "11111111", "22222222", "33333333", "44444444"] {
            let guess = if guess == carol_code {
                "55555555"
            } else {
                guess
            };
            let (status, _) = b
                .post(
                    &reset,
                    &[
                        ("flow", &carol_flow),
                        ("code", guess),
                        ("password", "carol-new-password"),
                    ],
                )
                .await;
            assert_eq!(status, 400);
        }
        let (status, _) = b
            .post(
                &reset,
                &[
                    ("flow", &carol_flow),
                    ("code", &carol_code),
                    ("password", "carol-new-password"),
                ],
            )
            .await;
        assert_eq!(status, 400, "the right code after five wrong ones");
        let c = reqwest::Client::new();
        assert_eq!(c.get(&carol_link).send().await.unwrap().status(), 400);
        assert!(p.can_sign_in("carol", "carol-old-password").await);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn known_and_unknown_addresses_get_the_same_page_status_and_time() {
    let db = TestDb::sqlite();
    let p = Project::start(db, "").await;
    let (b, _, _) = Browser::open(&format!("{}/auth/forgot", p.base())).await;
    let url = format!("{}/auth/forgot", p.base());
    let mut known = Vec::new();
    let mut unknown = Vec::new();
    let mut pages = Vec::new();
    for i in 0..15 {
        for (address, times) in [
            ("alice@example.com", &mut known),
            ("nobody@example.com", &mut unknown),
        ] {
            let started = Instant::now();
            let (status, page) = b.post(&url, &[("email", address)]).await;
            times.push(started.elapsed());
            assert_eq!(status, 200);
            if i == 0 {
                // The flow id differs per request; the rest is the same.
                let flow = hidden_value(&page, "flow");
                pages.push(page.replace(&flow, "FLOW"));
            }
        }
    }
    assert_eq!(pages[0], pages[1], "the same page for both");
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2].as_secs_f64()
    };
    let (k, u) = (median(&mut known), median(&mut unknown));
    // Within 20% of each other; answers of well under a millisecond on a
    // loaded machine differ by scheduling alone, so a difference below
    // 2 ms (far under what a network lets anyone measure) passes too. A
    // lookup, a hash or a write before the answer would take far more.
    assert!(
        (k - u).abs() <= 0.2 * k.max(u) + 0.002,
        "medians: known {k:.4}s, unknown {u:.4}s"
    );
    // Only the known address got mail, and once (one a minute).
    assert_eq!(p.mail_to("alice@example.com", 1).await.len(), 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(p.messages().len(), 1, "nothing to the unknown address");
}

#[tokio::test(flavor = "multi_thread")]
async fn expired_links_and_codes_are_refused() {
    for db in TestDb::each().await {
        let p = Project::start(db, "[auth.email]\nreset_ttl = \"2s\"\ncode_ttl = \"1s\"\n").await;
        let (b, _, _) = Browser::open(&format!("{}/auth/forgot", p.base())).await;
        let (_, page) = b
            .post(
                &format!("{}/auth/forgot", p.base()),
                &[("email", "alice@example.com")],
            )
            .await;
        let flow = hidden_value(&page, "flow");
        let (link, code) = link_and_code(&p.mail_to("alice@example.com", 1).await[0]);
        let (lb, status, page) = Browser::open(&link).await;
        assert_eq!(status, 200);
        let token = hidden_value(&page, "token");
        tokio::time::sleep(Duration::from_millis(3100)).await;
        let reset = format!("{}/auth/reset", p.base());
        let (status, _) = b
            .post(
                &reset,
                &[
                    ("flow", &flow),
                    ("code", &code),
                    ("password", "alice-new-password"),
                ],
            )
            .await;
        assert_eq!(status, 400, "an expired code");
        let (status, _) = lb
            .post(
                &reset,
                &[("token", &token), ("password", "alice-new-password")],
            )
            .await;
        assert_eq!(status, 400, "an expired link");
        assert!(p.can_sign_in("alice", "alice-old-password").await);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flow_started_from_an_authorization_request_returns_to_it() {
    let db = TestDb::sqlite();
    let p = Project::start(db, "").await;
    // Any authorization request's parameters travel through the flow; the
    // page they come back to validates them again.
    let params = "response_type=code&client_id=app&state=s1";
    let (b, status, page) = Browser::open(&format!("{}/auth/forgot?{params}", p.base())).await;
    assert_eq!(status, 200);
    assert!(page.contains("name=\"state\" value=\"s1\""), "{page}");
    let (_, page) = b
        .post(
            &format!("{}/auth/forgot", p.base()),
            &[
                ("email", "alice@example.com"),
                ("response_type", "code"),
                ("client_id", "app"),
                ("state", "s1"),
            ],
        )
        .await;
    let (link, _) = link_and_code(&p.mail_to("alice@example.com", 1).await[0]);
    assert!(page.contains("name=\"state\" value=\"s1\""), "{page}");
    let (lb, _, page) = Browser::open(&link).await;
    let token = hidden_value(&page, "token");
    let r =
        lb.c.post(format!("{}/auth/reset", p.base()))
            .header("cookie", &lb.cookie)
            .form(&[
                ("csrf", lb.csrf.as_str()),
                ("token", &token),
                ("password", "alice-new-password"),
            ])
            .send()
            .await
            .unwrap();
    assert_eq!(r.status(), 302);
    let location = r.headers()["location"].to_str().unwrap().to_string();
    assert!(
        location.starts_with(&format!("{}/oauth/authorize?", p.base()))
            && location.contains("state=s1"),
        "{location}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flow_token_and_its_message_commit_or_roll_back_together() {
    use gatehouse_accounts::{StoreAccounts, StoreFlows};
    use gatehouse_auth::{
        Accounts, Claims, FlowMail, FlowPurpose, FlowToken, MailFlows, UserRecord,
    };
    use std::sync::Arc;

    for db in TestDb::each().await {
        let store = db.open(gatehouse_testkit::model(SCHEMA)).await;
        let auth = Arc::new(gatehouse_auth_store::SqlAuthRepo::new(store.db().clone()));
        let outbox = gatehouse_outbox::Outbox::open(store.db().clone())
            .await
            .unwrap();
        let accounts = StoreAccounts::new(&store, auth.clone()).unwrap();
        let flows = StoreFlows::new(&accounts, outbox.clone()).unwrap();
        let credential = UserRecord {
            username: String::new(),
            password_hash: "x".into(),
            scopes: vec![],
            claims: Claims::new(),
            created_at: 0,
            updated_at: 0,
        };
        let dana = accounts
            .create("dana", None, None, &Claims::new(), &credential)
            .await
            .unwrap()
            .unwrap();
        let token = FlowToken {
            id: "flow-1".into(),
            purpose: FlowPurpose::Reset,
            sub: Some(dana.sub.clone()),
            address: "dana@example.com".into(),
            link_hash: Some("link".into()),
            code_hash: Some("code".into()),
            payload: json!({}),
            created_at: 1,
            expires_at: i64::MAX,
            code_expires_at: i64::MAX,
            attempts: 0,
            used_at: None,
        };
        let mail = FlowMail {
            to: "dana@example.com".into(),
            subject: "Reset your password".into(),
            text: "a link".into(),
        };
        assert!(flows.send(&token, &mail).await.unwrap());
        let mut second = mail.clone();
        second.subject = "Second".into();
        // The same token id again (to another address, under its limits):
        // its insert fails, so its message is rolled back with it.
        let mut again = token.clone();
        again.address = "other@example.com".into();
        assert!(
            flows.send(&again, &second).await.is_err(),
            "{}",
            db.backend()
        );
        // Another token to the same address within the minute: over the
        // address's limits, neither it nor its message is written.
        let mut third = token.clone();
        third.id = "flow-3".into();
        assert!(
            !flows.send(&third, &second).await.unwrap(),
            "{}",
            db.backend()
        );
        assert!(flows.token("flow-3").await.unwrap().is_none());
        let messages = outbox.list(None, None, 10).await.unwrap();
        assert_eq!(messages.len(), 1, "{}: {messages:?}", db.backend());
        assert_eq!(messages[0].payload["subject"], json!("Reset your password"));
        assert!(flows.token("flow-1").await.unwrap().is_some());
    }
}

// Verification at sign-up.

const SIGN_UP: &str = "sign_up = true";
const REQUIRED: &str = "sign_up = true\n\n[auth.email]\nverification = \"required\"";
const OFF: &str = "sign_up = true\n\n[auth.email]\nverification = \"off\"";
const NEW_PASSWORD: &str = "a-long-new-password";
const CALLBACK: &str = "http://127.0.0.1/callback";

/// A browser that signs up as `username` with `address` from the
/// sign-up page of an authorization request by the first-party client
/// `web`; it keeps its cookie, and returns the answer to the sign-up.
async fn sign_up(p: &Project, username: &str, address: &str) -> (Tab, Page) {
    let mut tab = Tab::new();
    let challenge = pkce_challenge(&pkce_verifier("verify"));
    let url = authorize_url(
        &p.base(),
        &[
            ("response_type", "code"),
            ("client_id", "web"),
            ("redirect_uri", CALLBACK),
            ("scope", "openid read"),
            ("state", "st-1"),
            ("code_challenge", &challenge),
            ("code_challenge_method", "S256"),
            ("screen", "sign_up"),
        ],
    );
    let page = tab.get(&url).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("name=\"email\""), "{}", page.body);
    let page = tab
        .submit(
            &format!("{}/oauth/authorize", p.base()),
            &page,
            &[
                ("action", "sign_up"),
                ("username", username),
                ("email", address),
                ("password", NEW_PASSWORD),
            ],
        )
        .await;
    (tab, page)
}

/// The first form of `page` (the code's, on "check your e-mail"), posted
/// with `fields` to `action` under the issuer.
async fn post_first_form(
    p: &Project,
    tab: &mut Tab,
    page: &Page,
    action: &str,
    fields: &[(&str, &str)],
) -> Page {
    tab.submit(&format!("{}{action}", p.base()), &form(page, 0), fields)
        .await
}

/// The `n`th form of `page` alone (the "check your e-mail" page has two).
fn form(page: &Page, n: usize) -> Page {
    Page {
        status: page.status,
        headers: page.headers.clone(),
        body: page.body.split("</form>").nth(n).unwrap_or("").to_string(),
    }
}

/// "Resend" on a "check your e-mail" page.
async fn resend(p: &Project, tab: &mut Tab, page: &Page) -> Page {
    tab.submit(
        &format!("{}/auth/verify/resend", p.base()),
        &form(page, 1),
        &[],
    )
    .await
}

/// The verification link and code of a message.
fn verify_link_and_code(message: &str) -> (String, String) {
    let link = message
        .split_whitespace()
        .find(|w| w.contains("/auth/verify?token="))
        .unwrap_or_else(|| panic!("no verification link in {message}"))
        .to_string();
    let (_, code) = link_and_code(&message.replace("/auth/verify?token=", "/auth/reset?token="));
    (link, code)
}

/// Whether the redirect goes back to the sign-in page of the sign-up's
/// authorization request.
fn back_to_the_request(p: &Project, page: &Page) -> bool {
    page.status == 302
        && page.location().is_some_and(|l| {
            l.starts_with(&format!("{}/oauth/authorize?", p.base())) && l.contains("state=st-1")
        })
}

#[tokio::test(flavor = "multi_thread")]
async fn an_address_given_at_sign_up_is_confirmed_by_its_link_which_scanners_cannot_spend() {
    for db in TestDb::each().await {
        let p = Project::start(db, SIGN_UP).await;
        let (_, page) = sign_up(&p, "dave", "Dave@Example.com").await;
        assert_eq!(page.status, 200, "{}", page.body);
        assert!(page.body.contains("Check your e-mail"), "{}", page.body);
        assert!(page.body.contains("Resend"), "{}", page.body);

        // Under `optional` the account exists at once, unverified.
        assert_eq!(p.verified("dave", NEW_PASSWORD).await, json!(false));
        let mail = p.mail_to("dave@example.com", 1).await;
        assert_eq!(mail.len(), 1, "{mail:?}");
        let (link, _) = verify_link_and_code(&mail[0]);
        assert!(
            link.starts_with(&format!("{}/auth/verify?token=", p.base())),
            "{link}"
        );

        // A scanner opens the link (GET and HEAD): nothing is spent.
        let c = reqwest::Client::new();
        assert_eq!(c.head(&link).send().await.unwrap().status(), 200);
        assert_eq!(c.get(&link).send().await.unwrap().status(), 200);
        assert_eq!(p.verified("dave", NEW_PASSWORD).await, json!(false));

        // The person presses the page's button: verified, and back to the
        // authorization request the sign-up came from.
        let mut tab = Tab::new();
        let page = tab.get(&link).await;
        assert!(
            page.body.contains("Confirm your e-mail address"),
            "{}",
            page.body
        );
        let page = tab
            .submit(&format!("{}/auth/verify", p.base()), &page, &[])
            .await;
        assert!(back_to_the_request(&p, &page), "{page:?}");
        assert_eq!(p.verified("dave", NEW_PASSWORD).await, json!(true));

        // The link is spent.
        assert_eq!(c.get(&link).send().await.unwrap().status(), 400);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_code_confirms_the_address_and_five_wrong_codes_cancel_it_link_included() {
    for db in TestDb::each().await {
        let p = Project::start(db, SIGN_UP).await;
        let (mut tab, page) = sign_up(&p, "dave", "dave@example.com").await;
        let (_, code) = verify_link_and_code(&p.mail_to("dave@example.com", 1).await[0]);
        let wrong = if code == "00000000" {
            "11111111"
        } else {
            "00000000"
        };
        let page = post_first_form(&p, &mut tab, &page, "/auth/verify", &[("code", wrong)]).await;
        assert_eq!(page.status, 400, "{}", page.body);
        let page = post_first_form(&p, &mut tab, &page, "/auth/verify", &[("code", &code)]).await;
        assert!(back_to_the_request(&p, &page), "{page:?}");
        assert_eq!(p.verified("dave", NEW_PASSWORD).await, json!(true));

        let (mut tab, mut page) = sign_up(&p, "erin", "erin@example.com").await;
        let (link, code) = verify_link_and_code(&p.mail_to("erin@example.com", 1).await[0]);
        let wrong = if code == "00000000" {
            "11111111"
        } else {
            "00000000"
        };
        for _ in 0..5 {
            page = post_first_form(&p, &mut tab, &page, "/auth/verify", &[("code", wrong)]).await;
            assert_eq!(page.status, 400, "{}", page.body);
        }
        let page = post_first_form(&p, &mut tab, &page, "/auth/verify", &[("code", &code)]).await;
        assert_eq!(page.status, 400, "the right code no longer works");
        let c = reqwest::Client::new();
        assert_eq!(
            c.get(&link).send().await.unwrap().status(),
            400,
            "nor the link"
        );
        assert_eq!(p.verified("erin", NEW_PASSWORD).await, json!(false));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn resend_answers_the_same_page_and_sends_a_new_code_once_the_address_may_get_one() {
    let p = Project::start(TestDb::sqlite(), SIGN_UP).await;
    let (mut tab, page) = sign_up(&p, "dave", "dave@example.com").await;
    assert_eq!(p.mail_to("dave@example.com", 1).await.len(), 1);

    // At once: the same page with a new flow, and nothing sent (one
    // message a minute per address).
    let first_flow = page.hidden("flow").unwrap();
    let resent = resend(&p, &mut tab, &page).await;
    assert_eq!(resent.status, 200, "{}", resent.body);
    assert!(resent.body.contains("Check your e-mail"));
    assert_ne!(resent.hidden("flow").unwrap(), first_flow);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(p.mail_to("dave@example.com", 1).await.len(), 1);

    // A minute later, a second message, whose code works on the page of
    // the resend.
    tokio::time::sleep(Duration::from_secs(61)).await;
    let resent = resend(&p, &mut tab, &resent).await;
    let mail = p.mail_to("dave@example.com", 2).await;
    assert_eq!(mail.len(), 2, "{mail:?}");
    let (_, code) = verify_link_and_code(&mail[1]);
    let done = post_first_form(&p, &mut tab, &resent, "/auth/verify", &[("code", &code)]).await;
    assert!(back_to_the_request(&p, &done), "{done:?}");
    assert_eq!(p.verified("dave", NEW_PASSWORD).await, json!(true));
}

#[tokio::test(flavor = "multi_thread")]
async fn with_verification_off_sign_up_sends_nothing_and_goes_on_at_once() {
    let p = Project::start(TestDb::sqlite(), OFF).await;
    let (_, page) = sign_up(&p, "dave", "dave@example.com").await;
    assert_eq!(page.status, 302, "{}", page.body);
    assert!(page.location().unwrap().starts_with(CALLBACK), "{page:?}");
    assert_eq!(p.verified("dave", NEW_PASSWORD).await, json!(false));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(p.mail_to("dave@example.com", 0).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn with_optional_verification_a_taken_address_is_refused_like_a_taken_name() {
    for db in TestDb::each().await {
        let p = Project::start(db, SIGN_UP).await;
        let (_, page) = sign_up(&p, "mallory", "ALICE@example.com").await;
        assert_eq!(page.status, 400, "{}", page.body);
        assert!(
            page.body.contains("this e-mail address is not available"),
            "{}",
            page.body
        );
        assert!(!p.can_sign_in("mallory", NEW_PASSWORD).await, "no account");
        let (_, page) = sign_up(&p, "alice", "someone@example.com").await;
        assert!(page.body.contains("this user name is not available"));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn with_required_verification_confirming_the_address_creates_the_account() {
    for db in TestDb::each().await {
        let p = Project::start(db, REQUIRED).await;
        let (mut tab, page) = sign_up(&p, "dave", "dave@example.com").await;
        assert_eq!(page.status, 200, "{}", page.body);
        assert!(page.body.contains("Check your e-mail"), "{}", page.body);
        assert!(!page.body.contains("Continue without confirming"));

        // No account before the address is confirmed.
        let mail = p.mail_to("dave@example.com", 1).await;
        assert_eq!(mail.len(), 1, "{mail:?}");
        assert!(!p.can_sign_in("dave", NEW_PASSWORD).await);

        let (_, code) = verify_link_and_code(&mail[0]);
        let page = post_first_form(&p, &mut tab, &page, "/auth/verify", &[("code", &code)]).await;
        assert!(back_to_the_request(&p, &page), "{page:?}");

        // Confirmed: it signs in, verified, on the page it came back to.
        assert_eq!(p.verified("dave", NEW_PASSWORD).await, json!(true));
        let params = sign_in_for_code(
            &p.base(),
            "web",
            CALLBACK,
            "openid read",
            &pkce_verifier("dave"),
            ("dave", NEW_PASSWORD),
        )
        .await;
        assert!(params.contains_key("code"), "{params:?}");

        // An account whose address is not confirmed cannot sign in.
        assert!(!p.can_sign_in("alice", "alice-old-password").await);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn with_required_verification_a_taken_address_gets_the_same_page_and_its_owner_a_notice() {
    for db in TestDb::each().await {
        let p = Project::start(db, REQUIRED).await;
        let (_, taken) = sign_up(&p, "mallory", "Alice@Example.com").await;
        let (_, free) = sign_up(&p, "dave", "dave@example.com").await;
        assert_eq!(taken.status, free.status);
        let page = |pg: &Page| {
            let flow = pg.hidden("flow").unwrap();
            let csrf = pg.hidden("csrf").unwrap();
            pg.body.replace(&flow, "FLOW").replace(&csrf, "CSRF")
        };
        assert_eq!(page(&taken), page(&free), "the same page for both");

        let notice = p.mail_to("alice@example.com", 1).await;
        assert_eq!(notice.len(), 1, "{notice:?}");
        assert!(notice[0].contains("Someone tried to"), "{}", notice[0]);
        assert!(
            !notice[0].contains("/auth/verify?token="),
            "a notice carries no link"
        );
        assert!(!p.can_sign_in("mallory", NEW_PASSWORD).await);
    }
}

/// `POST /auth/email` as the holder of `token`.
async fn change_email(p: &Project, token: &str, email: &str, password: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{}/auth/email", p.base()))
        .bearer_auth(token)
        .json(&json!({ "email": email, "password": password }))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// `POST /auth/email/confirm` with a code, as the holder of `token`.
async fn confirm_email(p: &Project, token: &str, code: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{}/auth/email/confirm", p.base()))
        .bearer_auth(token)
        .json(&json!({ "code": code }))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// The address of the account behind `token`, and whether it is verified.
async fn address_of(p: &Project, token: &str) -> (Value, Value) {
    let r = gatehouse_testkit::graphql(
        &reqwest::Client::new(),
        &format!("{}/graphql", p.base()),
        Some(token),
        "{ users { email emailVerified } }",
        json!({}),
    )
    .await;
    let row = &r["data"]["users"][0];
    (row["email"].clone(), row["emailVerified"].clone())
}

/// The e-mail change link and code a message carries.
fn change_link_and_code(message: &str) -> (String, String) {
    let link = message
        .split_whitespace()
        .find(|w| w.contains("/auth/email/confirm?token="))
        .unwrap_or_else(|| panic!("no link in {message}"))
        .to_string();
    let (_, code) = link_and_code(&message.replace("/auth/email/confirm?", "/auth/reset?"));
    (link, code)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_email_change_is_confirmed_by_its_link_which_scanners_cannot_spend() {
    for db in TestDb::each().await {
        let p = Project::start(db, "").await;
        let alice = p.token("alice", "alice-old-password", "read").await;

        // A wrong password is 403 and sends nothing; a malformed address is 400.
        let (status, body) =
            change_email(&p, &alice, "alice.new@example.com", "not-her-password").await;
        assert_eq!(status, 403, "{body}");
        let (status, body) = change_email(&p, &alice, "no address", "alice-old-password").await;
        assert_eq!(status, 400, "{body}");
        // Without a user's token: 401.
        let (status, _) = change_email(&p, "not-a-token", "x@example.com", "x").await;
        assert_eq!(status, 401);

        let (status, body) =
            change_email(&p, &alice, "Alice.New@Example.com", "alice-old-password").await;
        assert_eq!(status, 202, "{body}");
        let mail = p.mail_to("alice.new@example.com", 1).await;
        assert_eq!(mail.len(), 1, "one message to the new address: {mail:?}");
        let (link, _) = change_link_and_code(&mail[0]);
        assert!(
            link.starts_with(&format!("{}/auth/email/confirm?token=", p.base())),
            "{link}"
        );
        let notice = p.mail_to("alice@example.com", 1).await;
        assert_eq!(notice.len(), 1, "a notice to the old address: {notice:?}");
        assert!(notice[0].contains("alice.new@example.com"), "{}", notice[0]);
        assert!(!notice[0].contains("token="), "a notice carries no link");

        // Nothing changes before confirmation.
        assert_eq!(
            address_of(&p, &alice).await,
            (json!("alice@example.com"), json!(false))
        );

        // A scanner opens the link (GET and HEAD): nothing is spent.
        let c = reqwest::Client::new();
        assert_eq!(c.head(&link).send().await.unwrap().status(), 200);
        assert_eq!(c.get(&link).send().await.unwrap().status(), 200);
        let (b, status, page) = Browser::open(&link).await;
        assert_eq!(status, 200);
        let token = hidden_value(&page, "token");
        let confirm = format!("{}/auth/email/confirm", p.base());

        // The page's POST needs its CSRF token.
        let (status, _) = Browser {
            c: b.c.clone(),
            cookie: b.cookie.clone(),
            csrf: "forged".into(),
        }
        .post(&confirm, &[("token", &token)])
        .await;
        assert_eq!(status, 403);

        let (status, page) = b.post(&confirm, &[("token", &token)]).await;
        assert_eq!(status, 200, "{page}");
        assert!(page.contains("Your e-mail address is changed"), "{page}");
        assert_eq!(
            address_of(&p, &alice).await,
            (json!("alice.new@example.com"), json!(true)),
            "the new address, verified"
        );

        // The link is spent; the access token still works (no claim changed).
        let (status, _) = b.post(&confirm, &[("token", &token)]).await;
        assert_eq!(status, 400);
        assert_eq!(c.get(&link).send().await.unwrap().status(), 400);
        assert_eq!(p.mail_to("alice.new@example.com", 1).await.len(), 1);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_email_change_code_works_for_its_own_account_once_and_five_wrong_codes_kill_it() {
    for db in TestDb::each().await {
        let p = Project::start(db, "").await;
        let alice = p.token("alice", "alice-old-password", "read").await;
        let carol = p.token("carol", "carol-old-password", "read").await;
        let root = p
            .token("root", "root-password-0001", "admin read write")
            .await;
        assert_eq!(
            change_email(&p, &alice, "alice2@example.com", "alice-old-password")
                .await
                .0,
            202
        );
        assert_eq!(
            change_email(&p, &carol, "carol2@example.com", "carol-old-password")
                .await
                .0,
            202
        );
        let (_, alice_code) = change_link_and_code(&p.mail_to("alice2@example.com", 1).await[0]);
        let (carol_link, carol_code) =
            change_link_and_code(&p.mail_to("carol2@example.com", 1).await[0]);

        // Carol's code is no good to Alice, nor Alice's to the admin.
        let (status, body) = confirm_email(&p, &alice, &carol_code).await;
        assert_eq!(status, 400, "{body}");
        let (status, _) = confirm_email(&p, &root, &alice_code).await;
        assert_eq!(status, 400);
        assert_eq!(address_of(&p, &carol).await.0, json!("carol@example.com"));

        // Alice's own code, once.
        let (status, body) = confirm_email(&p, &alice, &alice_code).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["email"], "alice2@example.com");
        assert_eq!(
            address_of(&p, &alice).await,
            (json!("alice2@example.com"), json!(true))
        );
        assert_eq!(confirm_email(&p, &alice, &alice_code).await.0, 400);

        // Five wrong codes: Carol's right code and her link are dead.
        for guess in ["00000000", "11111111", "22222222", "33333333", "44444444"] {
            let guess = if guess == carol_code {
                "55555555"
            } else {
                guess
            };
            assert_eq!(confirm_email(&p, &carol, guess).await.0, 400);
        }
        assert_eq!(confirm_email(&p, &carol, &carol_code).await.0, 400);
        let c = reqwest::Client::new();
        assert_eq!(c.get(&carol_link).send().await.unwrap().status(), 400);
        assert_eq!(
            address_of(&p, &carol).await,
            (json!("carol@example.com"), json!(false))
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_email_change_to_a_taken_address_answers_the_same_and_tells_its_owner() {
    for db in TestDb::each().await {
        let p = Project::start(db, "").await;
        let alice = p.token("alice", "alice-old-password", "read").await;
        let root = p
            .token("root", "root-password-0001", "admin read write")
            .await;

        // Carol's address (in another case) gets the same answer as a free one.
        let taken = change_email(&p, &alice, "CAROL@example.com", "alice-old-password").await;
        let free = change_email(&p, &alice, "dave@example.com", "alice-old-password").await;
        assert_eq!(taken, free);
        assert_eq!(taken.0, 202);
        let notice = p.mail_to("carol@example.com", 1).await;
        assert_eq!(notice.len(), 1, "{notice:?}");
        assert!(notice[0].contains("Someone asked to move"), "{}", notice[0]);
        assert!(!notice[0].contains("token="), "a notice carries no link");
        assert_eq!(address_of(&p, &alice).await.0, json!("alice@example.com"));

        // Dave's address is taken (by a bypass caller, in another case)
        // before Alice confirms: the confirmation is refused, and spends
        // nothing.
        let (link, code) = change_link_and_code(&p.mail_to("dave@example.com", 1).await[0]);
        let carol_sub = p.sub("carol").await;
        let r = reqwest::Client::new()
            .patch(format!("{}/v1/users/{carol_sub}", p.base()))
            .bearer_auth(&root)
            .json(&json!({ "email": "Dave@Example.com" }))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
        let (status, body) = confirm_email(&p, &alice, &code).await;
        assert_eq!(status, 409, "{body}");
        let (b, status, _) = Browser::open(&link).await;
        assert_eq!(status, 200, "the link is still good");
        let token = link.split("token=").nth(1).unwrap();
        let (status, page) = b
            .post(
                &format!("{}/auth/email/confirm", p.base()),
                &[("token", token)],
            )
            .await;
        assert_eq!(status, 409, "{page}");
        assert!(page.contains("not available"), "{page}");
        assert_eq!(address_of(&p, &alice).await.0, json!("alice@example.com"));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_address_is_unique_without_regard_to_case_for_every_writer() {
    for db in TestDb::each().await {
        let p = Project::start(db, "").await;
        let root = p
            .token("root", "root-password-0001", "admin read write")
            .await;
        let c = reqwest::Client::new();
        let gql = |q: String| {
            let (c, root, url) = (c.clone(), root.clone(), format!("{}/graphql", p.base()));
            async move { gatehouse_testkit::graphql(&c, &url, Some(&root), &q, json!({})).await }
        };
        let conflict = |r: &Value| {
            r["errors"][0]["extensions"]["code"] == "CONFLICT"
                && r["errors"][0]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("without regard to case"))
        };

        // A bypass caller creating an account with Alice's address in
        // another case, or moving Carol to it.
        let r = gql(
            "mutation { createUser(input: {username: \"eve\", email: \"ALICE@example.com\"}) { id } }"
                .into(),
        )
        .await;
        assert!(conflict(&r), "{r}");
        let carol = p.sub("carol").await;
        let r = gql(format!(
            "mutation {{ updateUser(id: \"{carol}\", input: {{email: \"Alice@Example.COM\"}}) {{ id }} }}"
        ))
        .await;
        assert!(conflict(&r), "{r}");
        // Through REST too.
        let r = c
            .post(format!("{}/v1/users", p.base()))
            .bearer_auth(&root)
            .json(&json!({ "username": "eve", "email": "alice@EXAMPLE.com" }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 409, "{}", r.text().await.unwrap());

        // Another address, and the same address with its own case, are fine.
        let r = gql(
            "mutation { createUser(input: {username: \"eve\", email: \"Eve@example.com\"}) { email } }"
                .into(),
        )
        .await;
        assert_eq!(r["data"]["createUser"]["email"], "Eve@example.com", "{r}");
        let r = gql(format!(
            "mutation {{ updateUser(id: \"{carol}\", input: {{email: \"CAROL@example.com\"}}) {{ email }} }}"
        ))
        .await;
        assert_eq!(r["data"]["updateUser"]["email"], "CAROL@example.com", "{r}");
    }
}

/// A copy of `examples/library` (its config and schema, so that its mail
/// directory is a temporary one), served on a fresh SQLite database.
fn example() -> Project {
    let dir = tempfile::tempdir().unwrap();
    let from = gatehouse_testkit::repo_root().join("examples/library");
    std::fs::copy(
        from.join("gatehouse.toml"),
        dir.path().join("gatehouse.toml"),
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("schema")).unwrap();
    for entry in std::fs::read_dir(from.join("schema")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(
            entry.path(),
            dir.path().join("schema").join(entry.file_name()),
        )
        .unwrap();
    }
    let db = TestDb::sqlite();
    let server = serve(
        dir.path(),
        &["--config", "gatehouse.toml", "--listen", "127.0.0.1:0"],
        &[
            ("GATEHOUSE_DATABASE", db.url()),
            ("GATEHOUSE_SECRET", SECRET),
        ],
    );
    let mail = dir.path().join("data/mail");
    Project {
        dir,
        db,
        server: Some(server),
        mail,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_example_signs_up_with_a_confirmed_address_and_offers_a_password_reset() {
    let p = example();
    let app = ("demo-app", "demo-secret-change-me");
    let c = reqwest::Client::new();
    let challenge = pkce_challenge(&pkce_verifier("example"));
    let request = |screen: Option<&str>| {
        let mut params = vec![
            ("response_type", "code"),
            ("client_id", "demo-spa"),
            ("redirect_uri", CALLBACK),
            ("scope", "openid read"),
            ("state", "st-1"),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
        ];
        if let Some(s) = screen {
            params.push(("screen", s));
        }
        authorize_url(&p.base(), &params)
    };

    // The bootstrap users are account rows named as before, with their club.
    let alice = password_token(
        &c,
        &p.base(),
        app,
        ("alice", "alice-password"),
        Some("read"),
    )
    .await["access_token"]
        .as_str()
        .unwrap()
        .to_string();
    let own_rows = |token: String| {
        let (c, url) = (
            c.clone(),
            format!(
                "{}/v1/users?fields=username,email,emailVerified,club",
                p.base()
            ),
        );
        async move {
            let r = c.get(url).bearer_auth(token).send().await.unwrap();
            assert_eq!(r.status(), 200);
            let mut rows = r.json::<Value>().await.unwrap();
            for row in rows.as_array_mut().unwrap() {
                row.as_object_mut().unwrap().remove("id");
            }
            rows
        }
    };
    assert_eq!(
        own_rows(alice.clone()).await,
        json!([{"username": "alice", "email": null, "emailVerified": false, "club": "sf-readers"}])
    );
    let r = c
        .get(format!("{}/v1/users/alice", p.base()))
        .bearer_auth(&alice)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "alice's row is named alice");
    let r = gatehouse_testkit::graphql(
        &c,
        &format!("{}/graphql", p.base()),
        Some(&alice),
        "{ readingGroups { name } }",
        json!({}),
    )
    .await;
    assert_eq!(
        r["data"]["readingGroups"].as_array().map(Vec::len),
        Some(2),
        "{r}"
    );

    // Sign-up asks for an address; no account before it is confirmed.
    let mut tab = Tab::new();
    let page = tab.get(&request(Some("sign_up"))).await;
    assert!(page.body.contains("name=\"email\""), "{}", page.body);
    let page = tab
        .submit(
            &format!("{}/oauth/authorize", p.base()),
            &page,
            &[
                ("action", "sign_up"),
                ("username", "erin"),
                ("email", "Erin@Example.com"),
                ("password", NEW_PASSWORD),
            ],
        )
        .await;
    assert!(page.body.contains("Check your e-mail"), "{}", page.body);
    let erin = ("erin", NEW_PASSWORD);
    let refused = c
        .post(format!("{}/oauth/token", p.base()))
        .basic_auth(app.0, Some(app.1))
        .form(&[
            ("grant_type", "password"),
            ("username", erin.0),
            ("password", erin.1),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400, "no account before confirmation");
    let mail = p.mail_to("erin@example.com", 1).await;
    assert_eq!(
        mail.len(),
        1,
        "the file transport wrote the message: {mail:?}"
    );
    let (_, code) = verify_link_and_code(&mail[0]);
    let page = post_first_form(&p, &mut tab, &page, "/auth/verify", &[("code", &code)]).await;
    assert!(back_to_the_request(&p, &page), "{page:?}");
    let t = password_token(&c, &p.base(), app, erin, Some("read")).await;
    let token = t["access_token"].as_str().unwrap_or_else(|| panic!("{t}"));
    assert_eq!(
        own_rows(token.to_string()).await,
        json!([{"username": "erin", "email": "erin@example.com", "emailVerified": true, "club": null}])
    );

    // The sign-in page links "Forgot password?", whose form answers
    // "check your e-mail" (the reset itself is the flows' tests').
    let page = tab.get(&request(None)).await;
    let forgot = page
        .body
        .split("href=\"")
        .find(|s| s.starts_with("../auth/forgot?"))
        .and_then(|s| s.split('"').next())
        .unwrap_or_else(|| panic!("no Forgot password? link: {}", page.body))
        .replace("&#38;", "&")
        .replace("&amp;", "&");
    let page = tab
        .get(&format!(
            "{}/auth/{}",
            p.base(),
            forgot.trim_start_matches("../auth/")
        ))
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    let page = tab
        .submit(
            &format!("{}/auth/forgot", p.base()),
            &page,
            &[("email", "erin@example.com")],
        )
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("Check your e-mail"), "{}", page.body);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_owner_changes_the_address_only_through_the_flow_and_a_direct_change_is_unverified() {
    for db in TestDb::each().await {
        let p = Project::start(db, "").await;
        p.cli(
            &["user", "add", "dora", "--scopes", "read write"],
            "dora-password-0001\n",
        );
        let dora = p.token("dora", "dora-password-0001", "read write").await;
        let dora_sub = gatehouse_testkit::jwt_payload(&dora)["sub"]
            .as_str()
            .unwrap()
            .to_string();
        let c = reqwest::Client::new();

        // Her policy lets her update her row, but not its address.
        let r = c
            .patch(format!("{}/v1/users/{dora_sub}", p.base()))
            .bearer_auth(&dora)
            .json(&json!({ "email": "dora@example.com" }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403);
        assert!(r.text().await.unwrap().contains("/auth/email"));
        let r = gatehouse_testkit::graphql(
            &c,
            &format!("{}/graphql", p.base()),
            Some(&dora),
            &format!("mutation {{ updateUser(id: \"{dora_sub}\", input: {{email: \"d@example.com\"}}) {{ id }} }}"),
            json!({}),
        )
        .await;
        assert_eq!(r["errors"][0]["extensions"]["code"], "FORBIDDEN", "{r}");

        // Alice's address, confirmed through the flow, then changed by a
        // bypass caller: no longer verified.
        let alice = p.token("alice", "alice-old-password", "read").await;
        assert_eq!(
            change_email(&p, &alice, "alice2@example.com", "alice-old-password")
                .await
                .0,
            202
        );
        let (_, code) = change_link_and_code(&p.mail_to("alice2@example.com", 1).await[0]);
        assert_eq!(confirm_email(&p, &alice, &code).await.0, 200);
        assert_eq!(address_of(&p, &alice).await.1, json!(true));
        let root = p
            .token("root", "root-password-0001", "admin read write")
            .await;
        let alice_sub = p.sub("alice").await;
        let r = c
            .patch(format!("{}/v1/users/{alice_sub}", p.base()))
            .bearer_auth(&root)
            .json(&json!({ "email": "alice3@example.com" }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
        assert_eq!(
            address_of(&p, &alice).await,
            (json!("alice3@example.com"), json!(false))
        );
    }
}

/// Serves `p` once more (another instance when one runs), on its database.
fn instance(p: &Project) -> ServerProcess {
    serve(
        p.dir.path(),
        &["--config", "gatehouse.toml", "--listen", "127.0.0.1:0"],
        &[
            ("GATEHOUSE_DATABASE", p.db.url()),
            ("GATEHOUSE_SECRET", SECRET),
        ],
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_queued_while_the_mail_server_is_down_arrives_once_after_a_kill_and_a_restart() {
    for db in TestDb::each().await {
        let backend = db.backend();
        let mut p = Project::start(db, "").await;
        // The SMTP server's port, known before anything listens on it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        drop(p.server.take());
        let config = std::fs::read_to_string(p.dir.path().join("gatehouse.toml")).unwrap();
        let smtp = format!("transport = \"smtp\"\nurl = \"smtp://127.0.0.1:{port}?tls=off\"");
        let config = config.replace("transport = \"file\"\nurl = \"mail\"", &smtp);
        assert!(config.contains(&smtp));
        std::fs::write(p.dir.path().join("gatehouse.toml"), config).unwrap();
        p.server = Some(instance(&p));
        // On PostgreSQL a second instance delivers from the same outbox.
        let _other = (backend == "postgres").then(|| instance(&p));

        let (status, _, _) = forgot(&p, "alice@example.com").await;
        assert_eq!(status, 200);
        let server = p.server.take().unwrap();
        server.wait_for_log("not delivered", Duration::from_secs(15));
        server.signal("KILL");
        drop(server);

        let mut sink = gatehouse_testkit::SmtpSink::start_on(port).await;
        p.server = Some(instance(&p));
        let mail = sink.next().await;
        assert_eq!(mail.to, ["alice@example.com"], "{backend}");
        assert!(mail.data.contains("Reset"), "{backend}: {}", mail.data);
        // Once: no instance sends it again.
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert!(sink.try_next().is_none(), "{backend}: delivered twice");
    }
}
