//! Signing in through other identity providers (CONTRACT §16) through the
//! real binary, on SQLite and PostgreSQL, against in-process fakes: an
//! OpenID Connect provider (discovery, JWKS, a token endpoint that signs ID
//! tokens with a key the test makes, two issuers under one listener) and a
//! GitHub-shaped one. Every linking rule and every refusal.

use std::collections::HashMap;
use std::io::Write;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use gatehouse_testkit::{
    Browser, Page, ServerProcess, TestDb, authorize_url, jwt_payload, pkce_challenge, pkce_verifier,
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

const SECRET: &str = "providers-test-secret-0123456789";
const REDIRECT: &str = "http://127.0.0.1/callback";

// ----- the fake providers -----

/// Who the fake provider signs in next.
#[derive(Clone, Debug)]
struct FakeUser {
    sub: String,
    email: Option<String>,
    verified: bool,
    name: Option<String>,
}

fn user(sub: &str, email: Option<&str>, verified: bool) -> FakeUser {
    FakeUser {
        sub: sub.into(),
        email: email.map(str::to_string),
        verified,
        name: Some(sub.into()),
    }
}

/// How the fake misbehaves.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Normal,
    WrongNonce,
    WrongAud,
    WrongIss,
    Expired,
    ForeignKey,
    /// The token endpoint answers garbage.
    Garbage,
    /// The token endpoint answers after 15 s.
    Slow,
    /// The token endpoint answers 2 MiB.
    Huge,
    /// The ID token has neither address nor name: userinfo has them.
    UserinfoOnly,
    /// The provider rotated its key: a new `kid` the cached JWKS lacks.
    Rotated,
    /// The redirect back carries another issuer in `iss`.
    MixUp,
}

struct Key {
    encoding: jsonwebtoken::EncodingKey,
    jwk: Value,
}

fn es256_key(kid: &str) -> Key {
    let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let raw = pair.public_key_raw();
    assert_eq!(raw.len(), 65);
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    Key {
        encoding: jsonwebtoken::EncodingKey::from_ec_pem(pair.serialize_pem().as_bytes()).unwrap(),
        jwk: json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": kid,
            "x": b64(&raw[1..33]), "y": b64(&raw[33..65]),
        }),
    }
}

struct Grant {
    user: FakeUser,
    tenant: String,
    nonce: Option<String>,
    challenge: Option<String>,
}

struct FakeState {
    base: String,
    key: Key,
    foreign: Key,
    rotated: Key,
    mode: Mutex<Mode>,
    next: Mutex<FakeUser>,
    codes: Mutex<HashMap<String, Grant>>,
    seq: Mutex<u64>,
    /// Discovery answers 500.
    down: Mutex<bool>,
}

#[derive(Clone)]
struct Fake(Arc<FakeState>);

impl Fake {
    async fn start() -> Fake {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let fake = Fake(Arc::new(FakeState {
            base,
            key: es256_key("k1"),
            foreign: es256_key("k1"),
            rotated: es256_key("k2"),
            mode: Mutex::new(Mode::Normal),
            next: Mutex::new(user("nobody", None, false)),
            codes: Mutex::new(HashMap::new()),
            seq: Mutex::new(0),
            down: Mutex::new(false),
        }));
        let app = Router::new()
            .route("/{tenant}/.well-known/openid-configuration", get(discovery))
            .route("/{tenant}/jwks", get(jwks))
            .route("/{tenant}/authorize", get(authorize))
            .route("/{tenant}/token", post(token))
            .route("/{tenant}/userinfo", get(userinfo))
            .route("/gh/login/oauth/authorize", get(gh_authorize))
            .route("/gh/login/oauth/access_token", post(gh_token))
            .route("/ghapi/user", get(gh_user))
            .route("/ghapi/user/emails", get(gh_emails))
            .with_state(fake.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        fake
    }

    fn issuer(&self, tenant: &str) -> String {
        format!("{}/{tenant}", self.0.base)
    }

    fn set(&self, mode: Mode, next: FakeUser) {
        *self.0.mode.lock().unwrap() = mode;
        *self.0.next.lock().unwrap() = next;
    }

    fn code(&self, grant: Grant) -> String {
        let mut seq = self.0.seq.lock().unwrap();
        *seq += 1;
        let code = format!("code-{}", *seq);
        self.0.codes.lock().unwrap().insert(code.clone(), grant);
        code
    }
}

async fn discovery(State(f): State<Fake>, Path(tenant): Path<String>) -> Response {
    if *f.0.down.lock().unwrap() {
        return (StatusCode::INTERNAL_SERVER_ERROR, "down").into_response();
    }
    let iss = f.issuer(&tenant);
    axum::Json(json!({
        "issuer": iss,
        "authorization_endpoint": format!("{iss}/authorize"),
        "token_endpoint": format!("{iss}/token"),
        "jwks_uri": format!("{iss}/jwks"),
        "userinfo_endpoint": format!("{iss}/userinfo"),
        "response_types_supported": ["code"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic"],
        "authorization_response_iss_parameter_supported": true,
    }))
    .into_response()
}

async fn jwks(State(f): State<Fake>) -> Response {
    if *f.0.mode.lock().unwrap() == Mode::Rotated {
        return axum::Json(json!({ "keys": [f.0.key.jwk, f.0.rotated.jwk] })).into_response();
    }
    axum::Json(json!({ "keys": [f.0.key.jwk] })).into_response()
}

async fn authorize(
    State(f): State<Fake>,
    Path(tenant): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    assert_eq!(
        q.get("code_challenge_method").map(String::as_str),
        Some("S256")
    );
    assert!(q["scope"].split(' ').any(|s| s == "openid"), "{q:?}");
    let next = f.0.next.lock().unwrap().clone();
    let code = f.code(Grant {
        user: next,
        tenant: tenant.clone(),
        nonce: q.get("nonce").cloned(),
        challenge: q.get("code_challenge").cloned(),
    });
    let iss = if *f.0.mode.lock().unwrap() == Mode::MixUp {
        f.issuer("elsewhere")
    } else {
        f.issuer(&tenant)
    };
    let mut back = url_with(
        &q["redirect_uri"],
        &[("code", &code), ("state", &q["state"])],
    );
    back.push_str(&format!("&iss={}", enc(&iss)));
    Redirect::to(&back).into_response()
}

fn enc(v: &str) -> String {
    url::form_urlencoded::byte_serialize(v.as_bytes()).collect()
}

fn url_with(base: &str, params: &[(&str, &str)]) -> String {
    let mut q = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in params {
        q.append_pair(k, v);
    }
    format!("{base}?{}", q.finish())
}

/// The PKCE check every fake token endpoint makes.
fn pkce_ok(grant: &Grant, form: &HashMap<String, String>) -> bool {
    match (&grant.challenge, form.get("code_verifier")) {
        (Some(c), Some(v)) => &pkce_challenge(v) == c,
        _ => false,
    }
}

async fn token(
    State(f): State<Fake>,
    headers: axum::http::HeaderMap,
    axum::Form(form): axum::Form<HashMap<String, String>>,
) -> Response {
    // client_secret_basic with the configured secret.
    let basic = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    use base64::Engine;
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("gatehouse:provider-secret")
    );
    if basic != expected {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": "invalid_client"})),
        )
            .into_response();
    }
    let Some(grant) = f.0.codes.lock().unwrap().remove(&form["code"]) else {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": "invalid_grant"})),
        )
            .into_response();
    };
    if !pkce_ok(&grant, &form) {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": "invalid_grant"})),
        )
            .into_response();
    }
    let mode = *f.0.mode.lock().unwrap();
    match mode {
        Mode::Garbage => return (StatusCode::OK, "<html>surprise</html>").into_response(),
        Mode::Slow => tokio::time::sleep(Duration::from_secs(15)).await,
        Mode::Huge => {
            let filler = "x".repeat(2 * 1024 * 1024);
            return axum::Json(json!({ "access_token": filler, "token_type": "Bearer" }))
                .into_response();
        }
        _ => {}
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let u = &grant.user;
    let mut claims = json!({
        "iss": if mode == Mode::WrongIss { f.issuer("other-tenant") } else { f.issuer(&grant.tenant) },
        "sub": u.sub,
        "aud": if mode == Mode::WrongAud { "someone-else" } else { "gatehouse" },
        "iat": now,
        "exp": if mode == Mode::Expired { now - 600 } else { now + 300 },
        "nonce": if mode == Mode::WrongNonce { Some("not-the-nonce".to_string()) } else { grant.nonce.clone() },
    });
    if mode != Mode::UserinfoOnly {
        if let Some(e) = &u.email {
            claims["email"] = json!(e);
            claims["email_verified"] = json!(u.verified);
        }
        if let Some(n) = &u.name {
            claims["preferred_username"] = json!(n);
        }
    }
    let access = format!("upstream-access-{}", u.sub);
    f.0.codes.lock().unwrap().insert(
        access.clone(),
        Grant {
            user: u.clone(),
            tenant: grant.tenant.clone(),
            nonce: None,
            challenge: None,
        },
    );
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    header.kid = Some(if mode == Mode::Rotated { "k2" } else { "k1" }.into());
    let key = match mode {
        Mode::ForeignKey => &f.0.foreign.encoding,
        Mode::Rotated => &f.0.rotated.encoding,
        _ => &f.0.key.encoding,
    };
    let id_token = jsonwebtoken::encode(&header, &claims, key).unwrap();
    axum::Json(json!({
        "access_token": access,
        "token_type": "Bearer",
        "expires_in": 300,
        "id_token": id_token,
    }))
    .into_response()
}

async fn userinfo(State(f): State<Fake>, headers: axum::http::HeaderMap) -> Response {
    match gh_grant_user(&f, &headers) {
        Some(u) => axum::Json(json!({
            "sub": u.sub,
            "email": u.email,
            "email_verified": u.verified,
            "preferred_username": u.name,
        }))
        .into_response(),
        None => StatusCode::UNAUTHORIZED.into_response(),
    }
}

async fn gh_authorize(State(f): State<Fake>, Query(q): Query<HashMap<String, String>>) -> Response {
    assert_eq!(
        q.get("code_challenge_method").map(String::as_str),
        Some("S256")
    );
    let next = f.0.next.lock().unwrap().clone();
    let code = f.code(Grant {
        user: next,
        tenant: "gh".into(),
        nonce: None,
        challenge: q.get("code_challenge").cloned(),
    });
    Redirect::to(&url_with(
        &q["redirect_uri"],
        &[("code", &code), ("state", &q["state"])],
    ))
    .into_response()
}

async fn gh_token(
    State(f): State<Fake>,
    axum::Form(form): axum::Form<HashMap<String, String>>,
) -> Response {
    let grant = f.0.codes.lock().unwrap().remove(&form["code"]);
    match grant {
        Some(g) if pkce_ok(&g, &form) && form["client_secret"] == "provider-secret" => {
            let token = format!("gh-token-{}", g.user.sub);
            f.0.codes.lock().unwrap().insert(token.clone(), g);
            axum::Json(json!({"access_token": token, "token_type": "bearer"})).into_response()
        }
        // GitHub's way: 200 with an error.
        _ => axum::Json(json!({"error": "bad_verification_code"})).into_response(),
    }
}

fn gh_grant_user(f: &Fake, headers: &axum::http::HeaderMap) -> Option<FakeUser> {
    let token = headers
        .get("authorization")?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")?
        .to_string();
    f.0.codes
        .lock()
        .unwrap()
        .get(&token)
        .map(|g| g.user.clone())
}

async fn gh_user(State(f): State<Fake>, headers: axum::http::HeaderMap) -> Response {
    match gh_grant_user(&f, &headers) {
        Some(u) => axum::Json(json!({"id": u.sub.parse::<i64>().unwrap(), "login": u.name}))
            .into_response(),
        None => StatusCode::UNAUTHORIZED.into_response(),
    }
}

async fn gh_emails(State(f): State<Fake>, headers: axum::http::HeaderMap) -> Response {
    match gh_grant_user(&f, &headers) {
        Some(u) => axum::Json(json!([
            {"email": "old@example.org", "primary": false, "verified": true},
            {"email": u.email, "primary": true, "verified": u.verified},
        ]))
        .into_response(),
        None => StatusCode::UNAUTHORIZED.into_response(),
    }
}

// ----- the server under test -----

/// `[[auth.providers]]` of the tests: `corp` (tenant `a`) and `other`
/// (tenant `b`) on the fake, with `link` and `trust_email` given, and
/// GitHub.
fn config(fake: &Fake, sign_up: bool, link: &str, trust: bool) -> String {
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
sign_up = {sign_up}
sign_up_scopes = ["read", "openid"]

[[auth.providers]]
id = "corp"
name = "Corp"
kind = "oidc"
issuer = "{a}"
client_id = "gatehouse"
client_secret_env = "CORP_SECRET"
trust_email = {trust}
link = "{link}"

[[auth.providers]]
id = "other"
name = "Other"
kind = "oidc"
issuer = "{b}"
client_id = "gatehouse"
client_secret = "provider-secret"
trust_email = {trust}
link = "{link}"

[[auth.providers]]
id = "github"
name = "GitHub"
kind = "github"
client_id = "gatehouse"
client_secret = "provider-secret"
trust_email = true
github_url = "{base}/gh"
github_api_url = "{base}/ghapi"

[[bootstrap.clients]]
client_id = "app"
client_secret = "app-secret-0123456789"
grants = ["password", "refresh_token"]
scopes = ["openid", "read", "write", "admin"]

[[bootstrap.clients]]
client_id = "web"
public = true
first_party = true
grants = ["authorization_code", "refresh_token"]
scopes = ["openid", "read"]
redirect_uris = ["{REDIRECT}"]

[[bootstrap.clients]]
client_id = "third"
public = true
grants = ["authorization_code"]
scopes = ["openid", "read"]
redirect_uris = ["{REDIRECT}"]
"#,
        a = fake.issuer("a"),
        b = fake.issuer("b"),
        base = fake.0.base,
    )
}

struct Project {
    dir: tempfile::TempDir,
    db_url: String,
    servers: Vec<ServerProcess>,
}

impl Project {
    /// A project on `db` with `alice` (password, address
    /// alice@example.com, unverified) and `root`, and `instances` servers.
    async fn start(db: &TestDb, config: String, instances: usize) -> Project {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("schema")).unwrap();
        std::fs::write(dir.path().join("schema/types.graphql"), SCHEMA).unwrap();
        std::fs::write(dir.path().join("gatehouse.toml"), config).unwrap();
        let mut p = Project {
            dir,
            db_url: db.url().to_string(),
            servers: Vec::new(),
        };
        p.cli(
            &["user", "add", "root", "--scopes", "admin read write"],
            "root-password-0001\n",
        );
        p.cli(
            &["user", "add", "alice", "--scopes", "read openid"],
            "alice-password-01\n",
        );
        for _ in 0..instances {
            p.servers.push(serve(
                p.dir.path(),
                &["--config", "gatehouse.toml", "--listen", "127.0.0.1:0"],
                &[
                    ("GATEHOUSE_DATABASE", p.db_url.as_str()),
                    ("GATEHOUSE_SECRET", SECRET),
                    ("CORP_SECRET", "provider-secret"),
                ],
            ));
        }
        let root = p.password_token("root", "root-password-0001").await;
        let alice = p.sub_of(&p.password_token("alice", "alice-password-01").await);
        let r = reqwest::Client::new()
            .patch(format!("{}/v1/users/{alice}", p.base()))
            .bearer_auth(&root)
            .json(&json!({ "email": "alice@example.com" }))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
        p
    }

    fn cli(&self, args: &[&str], stdin: &str) {
        let mut child = bin()
            .args(args)
            .args(["--config", "gatehouse.toml"])
            .env("GATEHOUSE_DATABASE", &self.db_url)
            .env("GATEHOUSE_SECRET", SECRET)
            .env("CORP_SECRET", "provider-secret")
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
        self.servers[0].base.clone()
    }

    async fn password_token(&self, user: &str, password: &str) -> String {
        let scope = if user == "root" {
            "admin read write"
        } else {
            "read"
        };
        let t = gatehouse_testkit::password_token(
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

    fn sub_of(&self, token: &str) -> String {
        jwt_payload(token)["sub"].as_str().unwrap().to_string()
    }

    /// Every account's user name, address and verification, by name.
    async fn accounts(&self) -> Vec<(String, Value, Value)> {
        let root = self.password_token("root", "root-password-0001").await;
        let r = gatehouse_testkit::graphql(
            &reqwest::Client::new(),
            &format!("{}/graphql", self.base()),
            Some(&root),
            "{ users { username email emailVerified } }",
            json!({}),
        )
        .await;
        let mut out: Vec<_> = r["data"]["users"]
            .as_array()
            .unwrap_or_else(|| panic!("{r}"))
            .iter()
            .map(|u| {
                (
                    u["username"].as_str().unwrap().to_string(),
                    u["email"].clone(),
                    u["emailVerified"].clone(),
                )
            })
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The `.eml` files written so far whose text contains `needle`.
    fn mails_with(&self, needle: &str) -> usize {
        let Ok(entries) = std::fs::read_dir(self.dir.path().join("mail")) else {
            return 0;
        };
        entries
            .filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "eml"))
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .filter(|t| t.replace("=\r\n", "").replace("=\n", "").contains(needle))
            .count()
    }

    async fn wait_for_mail(&self, needle: &str, n: usize) -> usize {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let found = self.mails_with(needle);
            if found >= n || Instant::now() > deadline {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A browser's run through the flow.
struct Run {
    browser: Browser,
    verifier: String,
    client: &'static str,
}

impl Run {
    fn new() -> Run {
        Run {
            browser: Browser::new(),
            verifier: pkce_verifier("providers"),
            client: "web",
        }
    }

    /// The sign-in page, then "Continue with" `provider` on server `start`:
    /// the redirect to the provider.
    async fn start(&mut self, base: &str, provider: &str) -> Page {
        let url = authorize_url(
            base,
            &[
                ("response_type", "code"),
                ("client_id", self.client),
                ("redirect_uri", REDIRECT),
                ("scope", "openid read"),
                ("state", "app-state"),
                ("nonce", "app-nonce"),
                ("code_challenge", &pkce_challenge(&self.verifier)),
                ("code_challenge_method", "S256"),
            ],
        );
        let page = self.browser.get(&url).await;
        assert_eq!(page.status, 200, "{}", page.body);
        assert!(
            page.body
                .contains(&format!("action=\"../auth/providers/{provider}/start\"")),
            "{}",
            page.body
        );
        // The provider's form: the request's fields and the CSRF token.
        let mut fields: Vec<(String, String)> = Vec::new();
        for (k, v) in page.hidden_fields() {
            if k != "action" && !fields.iter().any(|(n, _)| *n == k) {
                fields.push((k, v));
            }
        }
        let page = self
            .browser
            .post(&format!("{base}/auth/providers/{provider}/start"), &fields)
            .await;
        assert_eq!(page.status, 303, "{}", page.body);
        page
    }

    /// The provider's redirect back (the fake answers at once).
    async fn at_provider(&mut self, page: &Page) -> String {
        let to_provider = page.location().unwrap().to_string();
        let back = self.browser.get(&to_provider).await;
        assert_eq!(back.status, 303, "{}", back.body);
        back.location().unwrap().to_string()
    }

    /// The whole way to the page after the callback.
    async fn sign_in(&mut self, base: &str, provider: &str) -> Page {
        let page = self.start(base, provider).await;
        let callback = self.at_provider(&page).await;
        self.browser.get(&callback).await
    }

    /// The code of the redirect to the app, exchanged: the token response.
    async fn tokens(&self, base: &str, page: &Page) -> Value {
        assert_eq!(page.status, 302, "{}", page.body);
        let params = page.redirect_params();
        assert_eq!(params.get("state").map(String::as_str), Some("app-state"));
        let r = reqwest::Client::new()
            .post(format!("{base}/oauth/token"))
            .form(&[
                ("grant_type", "authorization_code"),
                ("client_id", self.client),
                ("code", &params["code"]),
                ("redirect_uri", REDIRECT),
                ("code_verifier", &self.verifier),
            ])
            .send()
            .await
            .unwrap();
        let status = r.status();
        let body: Value = r.json().await.unwrap();
        assert_eq!(status, 200, "{body}");
        body
    }
}

fn claims(tokens: &Value) -> (Value, Value) {
    (
        jwt_payload(tokens["access_token"].as_str().unwrap()),
        jwt_payload(tokens["id_token"].as_str().unwrap()),
    )
}

async fn identities(base: &str, token: &str) -> (u16, Value) {
    let r = reqwest::Client::new()
        .get(format!("{base}/auth/identities"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

async fn unlink(base: &str, token: &str, id: &str) -> u16 {
    reqwest::Client::new()
        .delete(format!("{base}/auth/identities/{id}"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// `confirm` (the default) with sign-up on and addresses untrusted: a new
/// identity makes an account, a known one signs it in again, a matching
/// verified address asks for the account's password, an unverified one
/// never links; tokens say `amr: ["fed"]` and `idp` through a refresh;
/// the last way to sign in cannot be unlinked.
#[tokio::test]
async fn confirm_mode_creates_signs_in_and_links_after_the_password() {
    let fake = Fake::start().await;
    for db in TestDb::each().await {
        let be = db.backend();
        let p = Project::start(&db, config(&fake, true, "confirm", false), 1).await;
        let base = p.base();

        // A new identity: a new account, named from preferred_username.
        fake.set(Mode::Normal, user("u-100", Some("dana@example.net"), true));
        let mut run = Run::new();
        let page = run.sign_in(&base, "corp").await;
        let tokens = run.tokens(&base, &page).await;
        let (access, id) = claims(&tokens);
        assert_eq!(access["amr"], json!(["fed"]), "{be}");
        assert_eq!(access["idp"], "corp", "{be}");
        assert_eq!(id["amr"], json!(["fed"]), "{be}");
        assert_eq!(id["idp"], "corp", "{be}");
        assert_eq!(id["nonce"], "app-nonce", "{be}");
        assert_eq!(id["preferred_username"], "u-100", "{be}");
        let dana = access["sub"].as_str().unwrap().to_string();
        // Untrusted: the address is kept, unverified.
        assert!(
            p.accounts()
                .await
                .contains(&("u-100".into(), json!("dana@example.net"), json!(false))),
            "{be}: {:?}",
            p.accounts().await
        );
        // A refresh keeps how the user signed in.
        let r: Value = reqwest::Client::new()
            .post(format!("{base}/oauth/token"))
            .form(&[
                ("grant_type", "refresh_token"),
                ("client_id", "web"),
                ("refresh_token", tokens["refresh_token"].as_str().unwrap()),
            ])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let refreshed = jwt_payload(r["access_token"].as_str().unwrap());
        assert_eq!(
            (refreshed["amr"].clone(), refreshed["idp"].clone()),
            (json!(["fed"]), json!("corp")),
            "{be}: {r}"
        );

        // The same identity again: the same account.
        let mut run = Run::new();
        let page = run.sign_in(&base, "corp").await;
        let again = claims(&run.tokens(&base, &page).await).0;
        assert_eq!(again["sub"], json!(dana), "{be}");

        // A third-party client: the consent page, under the callback's
        // path, posts to the authorization endpoint; the code still says
        // how the user signed in.
        let mut run = Run::new();
        run.client = "third";
        let page = run.sign_in(&base, "corp").await;
        assert_eq!(page.status, 200, "{be}: {}", page.body);
        assert!(
            page.body.contains("action=\"../../../oauth/authorize\""),
            "{be}: {}",
            page.body
        );
        let approved = run
            .browser
            .submit(
                &format!("{base}/oauth/authorize"),
                &page,
                &[("action", "consent")],
            )
            .await;
        let third = claims(&run.tokens(&base, &approved).await);
        assert_eq!(third.0["sub"], json!(dana), "{be}");
        assert_eq!(third.0["idp"], "corp", "{be}");
        assert_eq!(third.1["amr"], json!(["fed"]), "{be}");

        // Its identities; the only way to sign in cannot go.
        let token = tokens["access_token"].as_str().unwrap();
        let (status, list) = identities(&base, token).await;
        assert_eq!(status, 200, "{be}: {list}");
        let list = list["identities"].as_array().unwrap().clone();
        assert_eq!(list.len(), 1, "{be}");
        assert_eq!(list[0]["provider"], "corp");
        assert_eq!(list[0]["issuer"], json!(fake.issuer("a")));
        assert_eq!(list[0]["subject"], "u-100");
        assert_eq!(list[0]["email"], "dana@example.net");
        assert!(
            list[0]["linked_at"].as_str().unwrap().ends_with('Z'),
            "{be}"
        );
        let dana_corp = list[0]["id"].as_str().unwrap().to_string();
        assert_eq!(unlink(&base, token, &dana_corp).await, 409, "{be}");
        assert_eq!(unlink(&base, token, "nope").await, 404, "{be}");

        // A second identity (another issuer, same address, verified): it
        // matches dana's address, but dana has no password: not linkable
        // this way, so a new account without the (taken) address.
        fake.set(Mode::Normal, user("u-100", Some("dana@example.net"), true));
        let mut run = Run::new();
        let page = run.sign_in(&base, "other").await;
        let other = claims(&run.tokens(&base, &page).await).0;
        assert_ne!(other["sub"], json!(dana), "{be}");
        assert!(
            p.accounts()
                .await
                .contains(&("u-100-2".into(), Value::Null, json!(false))),
            "{be}: {:?}",
            p.accounts().await
        );

        // Alice's address, verified at the provider: her password links.
        fake.set(Mode::Normal, user("u-200", Some("Alice@Example.com"), true));
        let mut run = Run::new();
        let page = run.sign_in(&base, "corp").await;
        assert_eq!(page.status, 200, "{be}: {}", page.body);
        assert!(
            page.body.contains("Link your Corp sign-in"),
            "{be}: {}",
            page.body
        );
        assert!(page.body.contains("alice"), "{be}");
        let link = format!("{base}/auth/providers/corp/link");
        let wrong = run
            .browser
            .submit(&link, &page, &[("password", "not-her-password")])
            .await;
        assert_eq!(wrong.status, 401, "{be}: {}", wrong.body);
        assert!(wrong.body.contains("The password is incorrect."), "{be}");
        // Another browser (no flow cookie) cannot use the page's handle.
        let mut thief = Browser::new();
        let stolen_page = thief.get(&format!("{base}/auth/forgot")).await;
        let mut fields = page.hidden_fields();
        fields.retain(|(k, _)| k != "csrf");
        fields.push((
            "csrf".into(),
            stolen_page.hidden("csrf").unwrap_or_default(),
        ));
        fields.push(("password".into(), "alice-password-01".into()));
        let stolen = thief.post(&link, &fields).await;
        assert_eq!(stolen.status, 400, "{be}: {}", stolen.body);
        let done = run
            .browser
            .submit(&link, &wrong, &[("password", "alice-password-01")])
            .await;
        let linked = claims(&run.tokens(&base, &done).await);
        let alice = p.sub_of(&p.password_token("alice", "alice-password-01").await);
        assert_eq!(linked.0["sub"], json!(alice), "{be}");
        assert_eq!(linked.0["idp"], "corp", "{be}");
        assert_eq!(
            p.wait_for_mail("Corp sign-in linked to your account", 1)
                .await,
            1,
            "{be}"
        );
        // From now on the pair signs alice in, with no page.
        let mut run = Run::new();
        let page = run.sign_in(&base, "corp").await;
        assert_eq!(
            claims(&run.tokens(&base, &page).await).0["sub"],
            json!(alice),
            "{be}"
        );
        // Alice has a password: she may unlink it.
        let alice_token = p.password_token("alice", "alice-password-01").await;
        let (_, list) = identities(&base, &alice_token).await;
        let id = list["identities"][0]["id"].as_str().unwrap().to_string();
        assert_eq!(unlink(&base, &alice_token, &id).await, 204, "{be}");
        assert_eq!(
            identities(&base, &alice_token).await.1["identities"],
            json!([]),
            "{be}"
        );

        // Alice's address unverified at the provider: never linked (no
        // password page), a new account without her address.
        fake.set(
            Mode::Normal,
            user("u-300", Some("alice@example.com"), false),
        );
        let mut run = Run::new();
        let page = run.sign_in(&base, "corp").await;
        let t = claims(&run.tokens(&base, &page).await).0;
        assert_ne!(t["sub"], json!(alice), "{be}");
        assert!(
            p.accounts()
                .await
                .contains(&("u-300".into(), Value::Null, json!(false))),
            "{be}: {:?}",
            p.accounts().await
        );
        // Identities without a token: 401.
        let r = reqwest::Client::new()
            .get(format!("{base}/auth/identities"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401, "{be}");
    }
}

/// `verified_email` with a trusted provider: a verified address on both
/// sides links at once (and tells the account); an unverified one on
/// either side does not. With sign-up off, an unknown identity is refused
/// on a page and nothing is created.
#[tokio::test]
async fn verified_email_mode_links_only_verified_addresses_and_sign_up_off_refuses() {
    let fake = Fake::start().await;
    for db in TestDb::each().await {
        let be = db.backend();
        let p = Project::start(&db, config(&fake, true, "verified_email", true), 1).await;
        let base = p.base();
        // Trusted and verified: erin's account has a verified address.
        fake.set(Mode::Normal, user("u-1", Some("erin@example.org"), true));
        let mut run = Run::new();
        let page = run.sign_in(&base, "corp").await;
        let erin = claims(&run.tokens(&base, &page).await).0["sub"].clone();
        assert!(
            p.accounts()
                .await
                .contains(&("u-1".into(), json!("erin@example.org"), json!(true))),
            "{be}: {:?}",
            p.accounts().await
        );
        // Another provider, same verified address: linked at once.
        fake.set(Mode::Normal, user("x-9", Some("erin@example.org"), true));
        let mut run = Run::new();
        let page = run.sign_in(&base, "other").await;
        let t = claims(&run.tokens(&base, &page).await).0;
        assert_eq!(t["sub"], erin, "{be}");
        assert_eq!(t["idp"], "other", "{be}");
        assert_eq!(
            p.wait_for_mail("Other sign-in linked to your account", 1)
                .await,
            1,
            "{be}"
        );
        // Alice's own address is unverified: never linked automatically.
        fake.set(Mode::Normal, user("x-10", Some("alice@example.com"), true));
        let mut run = Run::new();
        let page = run.sign_in(&base, "other").await;
        let t = claims(&run.tokens(&base, &page).await).0;
        let alice = p.sub_of(&p.password_token("alice", "alice-password-01").await);
        assert_ne!(t["sub"], json!(alice), "{be}");
        // The provider does not say it is verified: not linked to erin.
        fake.set(Mode::Normal, user("x-11", Some("erin@example.org"), false));
        let mut run = Run::new();
        let page = run.sign_in(&base, "other").await;
        let t = claims(&run.tokens(&base, &page).await).0;
        assert_ne!(t["sub"], erin, "{be}");
        // The provider rotated its key since its JWKS was cached: fetched
        // again, once, and the ID token accepted.
        fake.set(Mode::Rotated, user("rot-1", None, false));
        let mut run = Run::new();
        let page = run.sign_in(&base, "corp").await;
        assert_eq!(
            claims(&run.tokens(&base, &page).await).0["idp"],
            "corp",
            "{be}"
        );
        // Address and name only at userinfo: read there.
        fake.set(
            Mode::UserinfoOnly,
            user("ui-1", Some("uma@example.org"), true),
        );
        let mut run = Run::new();
        let page = run.sign_in(&base, "corp").await;
        run.tokens(&base, &page).await;
        assert!(
            p.accounts()
                .await
                .contains(&("ui-1".into(), json!("uma@example.org"), json!(true))),
            "{be}: {:?}",
            p.accounts().await
        );
        // GitHub: the primary address, verified and trusted.
        fake.set(Mode::Normal, user("4242", Some("gina@example.io"), true));
        let mut run = Run::new();
        let page = run.sign_in(&base, "github").await;
        let t = claims(&run.tokens(&base, &page).await).0;
        assert_eq!(t["idp"], "github", "{be}");
        assert_eq!(t["amr"], json!(["fed"]), "{be}");
        assert!(
            p.accounts()
                .await
                .contains(&("4242".into(), json!("gina@example.io"), json!(true))),
            "{be}: {:?}",
            p.accounts().await
        );
        let mut run = Run::new();
        let page = run.sign_in(&base, "github").await;
        assert_eq!(
            claims(&run.tokens(&base, &page).await).0["sub"],
            t["sub"],
            "{be}"
        );
        drop(p);

        // Sign-up off: a new identity is refused, nothing created.
        let db2 = if be == "sqlite" {
            TestDb::sqlite()
        } else {
            TestDb::postgres().await.unwrap()
        };
        let p = Project::start(&db2, config(&fake, false, "verified_email", true), 1).await;
        let before = p.accounts().await;
        fake.set(Mode::Normal, user("u-77", Some("zed@example.org"), true));
        let mut run = Run::new();
        let page = run.sign_in(&p.base(), "corp").await;
        assert_eq!(page.status, 403, "{be}: {}", page.body);
        assert!(page.body.contains("Signing in with Corp failed"), "{be}");
        assert!(page.body.contains("does not create accounts"), "{be}");
        assert_eq!(p.accounts().await, before, "{be}");
    }
}

/// Every refusal: a tampered or replayed `state`, a missing cookie, an ID
/// token with the wrong nonce, audience or issuer, expired or signed by a
/// foreign key, a mixed-up `iss`, a provider down, answering garbage or
/// too slowly. Each gives a page naming the provider; nothing is created.
#[tokio::test]
async fn every_refusal_is_a_page_and_creates_nothing() {
    let fake = Fake::start().await;
    for db in TestDb::each().await {
        let be = db.backend();
        let p = Project::start(&db, config(&fake, true, "confirm", false), 1).await;
        let base = p.base();
        let before = p.accounts().await;
        fake.set(Mode::Normal, user("r-1", Some("r@example.org"), true));

        // Tampered state.
        let mut run = Run::new();
        let start = run.start(&base, "corp").await;
        let callback = run.at_provider(&start).await;
        let tampered = callback.replace("state=", "state=x");
        let page = run.browser.get(&tampered).await;
        assert_eq!(page.status, 400, "{be}: {}", page.body);
        assert!(page.body.contains("Signing in with Corp failed"), "{be}");
        // Missing cookie: the right state from another browser.
        let mut run = Run::new();
        let start = run.start(&base, "corp").await;
        let callback = run.at_provider(&start).await;
        let page = Browser::new().get(&callback).await;
        assert_eq!(page.status, 400, "{be}: {}", page.body);
        assert!(
            page.body.contains("did not start this sign-in"),
            "{be}: {}",
            page.body
        );
        // The browser that started it still finishes it (another
        // browser's attempt spent nothing); then the state is spent.
        let ok = run.browser.get(&callback).await;
        assert_eq!(ok.status, 302, "{be}: {}", ok.body);
        let replay = run.browser.get(&callback).await;
        assert_eq!(replay.status, 400, "{be}: {}", replay.body);
        let made = p.accounts().await;
        assert_eq!(made.len(), before.len() + 1, "{be}");

        // Bad ID tokens: refused, named, nothing created.
        for mode in [
            Mode::WrongNonce,
            Mode::WrongAud,
            Mode::WrongIss,
            Mode::Expired,
            Mode::ForeignKey,
            Mode::MixUp,
        ] {
            fake.set(
                mode,
                user(&format!("bad-{mode:?}"), Some("bad@example.org"), true),
            );
            let mut run = Run::new();
            let page = run.sign_in(&base, "corp").await;
            assert_eq!(page.status, 403, "{be} {mode:?}: {}", page.body);
            assert!(
                page.body.contains("Signing in with Corp failed"),
                "{be} {mode:?}"
            );
        }
        // Garbage from the token endpoint.
        fake.set(Mode::Garbage, user("g-1", None, false));
        let mut run = Run::new();
        let page = run.sign_in(&base, "corp").await;
        assert_eq!(page.status, 502, "{be}: {}", page.body);
        assert!(page.body.contains("Corp is not answering"), "{be}");
        // Too large: at most 1 MiB is read.
        fake.set(Mode::Huge, user("h-1", None, false));
        let mut run = Run::new();
        let page = run.sign_in(&base, "corp").await;
        assert_eq!(page.status, 502, "{be}: {}", page.body);
        assert!(page.body.contains("Corp is not answering"), "{be}");
        // Too slow: the page comes after the timeout, not after the provider.
        fake.set(Mode::Slow, user("s-1", None, false));
        let mut run = Run::new();
        let t0 = Instant::now();
        let page = run.sign_in(&base, "corp").await;
        let took = t0.elapsed();
        assert_eq!(page.status, 502, "{be}: {}", page.body);
        assert!(took < Duration::from_secs(14), "{be}: {took:?}");
        // Down: discovery fails (the cache is bypassed by a new provider
        // flow only after its lifetime, so `other` has never been
        // discovered in this test).
        *fake.0.down.lock().unwrap() = true;
        fake.set(Mode::Normal, user("d-1", None, false));
        let mut run = Run::new();
        let url = authorize_url(
            &base,
            &[
                ("response_type", "code"),
                ("client_id", "web"),
                ("redirect_uri", REDIRECT),
                ("scope", "openid read"),
                ("code_challenge", &pkce_challenge(&run.verifier)),
                ("code_challenge_method", "S256"),
            ],
        );
        let signin = run.browser.get(&url).await;
        let mut fields: Vec<(String, String)> = Vec::new();
        for (k, v) in signin.hidden_fields() {
            if k != "action" && !fields.iter().any(|(n, _)| *n == k) {
                fields.push((k, v));
            }
        }
        let page = run
            .browser
            .post(&format!("{base}/auth/providers/other/start"), &fields)
            .await;
        assert_eq!(page.status, 502, "{be}: {}", page.body);
        assert!(page.body.contains("Other is not answering"), "{be}");
        *fake.0.down.lock().unwrap() = false;
        // A start without the CSRF token is refused.
        fields.retain(|(k, _)| k != "csrf");
        let page = Browser::new()
            .post(&format!("{base}/auth/providers/corp/start"), &fields)
            .await;
        assert_eq!(page.status, 403, "{be}: {}", page.body);

        assert_eq!(
            p.accounts().await,
            made,
            "{be}: nothing created by a refusal"
        );
        // The log has the causes, never a code.
        let logs = p.servers[0].logs().join("\n");
        assert!(logs.contains("identity provider answer refused"), "{be}");
        assert!(!logs.contains("code-"), "{be}: a code reached the log");
    }
}

/// A flow started on one instance finishes on another sharing the
/// PostgreSQL database: no server session.
#[tokio::test]
async fn a_flow_started_on_one_instance_finishes_on_another() {
    let Some(db) = TestDb::postgres().await else {
        return;
    };
    let fake = Fake::start().await;
    let p = Project::start(&db, config(&fake, true, "confirm", false), 2).await;
    let (one, two) = (p.servers[0].base.clone(), p.servers[1].base.clone());
    fake.set(Mode::Normal, user("m-1", Some("multi@example.org"), true));
    let mut run = Run::new();
    let start = run.start(&one, "corp").await;
    let callback = run.at_provider(&start).await;
    // The provider sends the browser back to the first instance's
    // callback URL; the second serves it (same path, same database).
    let on_two = callback.replacen(&one, &two, 1);
    assert_ne!(on_two, callback);
    let page = run.browser.get(&on_two).await;
    let t = claims(&run.tokens(&two, &page).await).0;
    assert_eq!(t["idp"], "corp");
    // And a replay on the first instance is refused.
    let page = run.browser.get(&callback).await;
    assert_eq!(page.status, 400, "{}", page.body);
}

/// Providers link identities to account rows: without an account type the
/// server refuses to start, and says why.
#[tokio::test]
async fn providers_need_an_account_type() {
    let fake = Fake::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("schema")).unwrap();
    std::fs::write(
        dir.path().join("schema/types.graphql"),
        "type Note { id: ID! text: String! }\ntype Query { notes: [Note!]! }\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("gatehouse.toml"),
        config(&fake, false, "confirm", false),
    )
    .unwrap();
    let db = TestDb::sqlite();
    let o = bin()
        .args([
            "serve",
            "--config",
            "gatehouse.toml",
            "--listen",
            "127.0.0.1:0",
        ])
        .env("GATEHOUSE_DATABASE", db.url())
        .env("GATEHOUSE_SECRET", SECRET)
        .env("CORP_SECRET", "provider-secret")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_ne!(o.status.code(), Some(0));
    assert!(
        stderr(&o).contains("`[[auth.providers]]` needs an account type"),
        "{}",
        stderr(&o)
    );
}
