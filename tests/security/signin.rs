//! The sign-in pages of the authorization code flow (CONTRACT §12): open
//! redirects through spellings of a registered redirect URI, forged form
//! posts, framing, code replay and PKCE downgrade, on the real binary and
//! both backends.

use gatehouse_testkit::{
    Browser, authorize_url, graphql, pkce_challenge, pkce_verifier, sign_in_for_code,
};
use serde_json::{Value, json};

use crate::Server;

const SPA_CB: &str = "https://spa.example/cb";
const LOOPBACK_CB: &str = "http://127.0.0.1/cb";

/// A public first-party app with one https and one loopback redirect URI.
const CLIENTS: &str = r#"
[[bootstrap.clients]]
client_id = "spa"
public = true
first_party = true
grants = ["authorization_code", "refresh_token"]
scopes = ["read", "write"]
redirect_uris = ["https://spa.example/cb", "http://127.0.0.1/cb"]
"#;

/// Spellings of `https://spa.example/cb` (and of the loopback one) an
/// attacker might hope the server accepts and redirects to.
const SPELLINGS: &[&str] = &[
    "https://SPA.example/cb",
    "HTTPS://spa.example/cb",
    "https://spa.example/CB",
    "https://spa.example/cb/",
    "https://spa.example/cb/x",
    "https://spa.example/cb/../evil",
    "https://spa.example/%63b",
    "https://spa.example/cb%2f..%2fevil",
    "https://spa.example/cb?next=https://evil.example",
    "https://spa.example/cb#x",
    "https://spa.example.evil.example/cb",
    "https://spa.example@evil.example/cb",
    "https://evil.example@spa.example/cb",
    "https://spa.example\\@evil.example/cb",
    "https://spa.example\\.evil.example/cb",
    "https://spa.example:8443/cb",
    "https://spa.example:443/cb",
    "http://spa.example/cb",
    "//evil.example/cb",
    "/cb",
    "javascript:alert(1)//https://spa.example/cb",
    "data:text/html,<script>alert(1)</script>",
    " https://spa.example/cb",
    "https://spa.example/cb%00",
    "http://127.0.0.1.evil.example/cb",
    "http://127.0.0.1:80@evil.example/cb",
    "http://127.0.0.1/cb/..",
    "http://localhost/cb",
    "http://[::1]/cb",
];

fn code_url(base: &str, redirect: &str, extra: &[(&str, &str)]) -> String {
    let challenge = pkce_challenge(&pkce_verifier("security"));
    let mut params = vec![
        ("response_type", "code"),
        ("client_id", "spa"),
        ("redirect_uri", redirect),
        ("scope", "read"),
        ("state", "st"),
        ("code_challenge", challenge.as_str()),
        ("code_challenge_method", "S256"),
    ];
    params.extend_from_slice(extra);
    authorize_url(base, &params)
}

async fn redeem(server: &Server, code: &str, verifier: &str) -> (u16, Value) {
    let r = server
        .client
        .post(format!("{}/oauth/token", server.base))
        .form(&[
            ("grant_type", "authorization_code"),
            ("client_id", "spa"),
            ("code", code),
            ("redirect_uri", SPA_CB),
            ("code_verifier", verifier),
        ])
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

#[tokio::test]
async fn the_code_flow_works_on_every_backend() {
    for server in Server::each_backend(CLIENTS).await {
        let verifier = pkce_verifier("backend");
        let back = sign_in_for_code(
            &server.base,
            "spa",
            SPA_CB,
            "read",
            &verifier,
            ("reader", "reader-password"),
        )
        .await;
        let (status, body) = redeem(&server, &back["code"], &verifier).await;
        assert_eq!(status, 200, "{}: {body}", server.backend());
        let token = body["access_token"].as_str().unwrap();
        let answer = graphql(
            &server.client,
            &format!("{}/graphql", server.base),
            Some(token),
            "{ __typename }",
            json!({}),
        )
        .await;
        assert_eq!(
            answer["data"]["__typename"],
            "Query",
            "{}",
            server.backend()
        );
    }
}

#[tokio::test]
async fn no_spelling_of_a_redirect_uri_redirects() {
    let server = Server::start(CLIENTS);
    let mut browser = Browser::new();
    for spelling in SPELLINGS {
        let page = browser.get(&code_url(&server.base, spelling, &[])).await;
        assert_eq!(page.status, 400, "{spelling}: {}", page.body);
        assert!(page.location().is_none(), "{spelling}");
        // Not even an error response reaches it.
        assert!(!page.body.contains("evil.example/cb\""), "{spelling}");
    }
    // The registered ones work; the loopback one on any port.
    for ok in [SPA_CB, LOOPBACK_CB, "http://127.0.0.1:49152/cb"] {
        let page = browser.get(&code_url(&server.base, ok, &[])).await;
        assert_eq!(page.status, 200, "{ok}");
    }
}

#[tokio::test]
async fn forged_form_posts_are_refused() {
    let server = Server::start(CLIENTS);
    let action = format!("{}/oauth/authorize", server.base);
    let mut victim = Browser::new();
    let page = victim.get(&code_url(&server.base, SPA_CB, &[])).await;
    let creds = [
        ("action", "sign_in"),
        ("username", "reader"),
        ("password", "reader-password"),
    ];
    // Another site posts the form: it has neither the cookie nor a field
    // that matches one it planted.
    let mut attacker = Browser::new();
    let mut stranger = Browser::new();
    let own = attacker.get(&code_url(&server.base, SPA_CB, &[])).await;
    for (who, form_page, fields) in [
        ("no cookie", &page, vec![]),
        ("no field", &page, vec![("csrf", "")]),
        ("attacker's field", &own, vec![]),
        ("made-up field", &page, vec![("csrf", "x")]),
    ] {
        let mut f = creds.to_vec();
        f.extend(fields);
        let b = if who == "no cookie" {
            &mut stranger
        } else {
            &mut victim
        };
        let r = b.submit(&action, form_page, &f).await;
        assert_eq!(r.status, 403, "{who}: {}", r.body);
        assert!(r.location().is_none(), "{who}");
    }
    // A consent ticket made for one request does not approve another.
    let r = victim
        .submit(
            &action,
            &page,
            &[("action", "consent"), ("ticket", "e30.AAAA")],
        )
        .await;
    assert_eq!(r.status, 400);
    assert!(r.location().is_none());
}

#[tokio::test]
async fn the_pages_refuse_framing_and_caching() {
    let server = Server::start(CLIENTS);
    let mut browser = Browser::new();
    for url in [
        code_url(&server.base, SPA_CB, &[]),
        code_url(&server.base, "https://evil.example/", &[]),
        format!("{}/oauth/authorize", server.base),
    ] {
        let page = browser.get(&url).await;
        assert_eq!(page.header("x-frame-options"), Some("DENY"), "{url}");
        let csp = page.header("content-security-policy").unwrap();
        assert!(csp.contains("frame-ancestors 'none'"), "{url}");
        assert!(
            csp.contains("default-src 'none'"),
            "no script may run: {url}"
        );
        assert_eq!(page.header("cache-control"), Some("no-store"), "{url}");
        assert_eq!(page.header("referrer-policy"), Some("no-referrer"), "{url}");
        assert!(!page.body.contains("<script"), "{url}");
    }
}

#[tokio::test]
async fn a_replayed_code_is_refused_and_revokes_its_tokens() {
    let server = Server::start(CLIENTS);
    let verifier = pkce_verifier("replay");
    let back = sign_in_for_code(
        &server.base,
        "spa",
        SPA_CB,
        "read",
        &verifier,
        ("reader", "reader-password"),
    )
    .await;
    let (status, first) = redeem(&server, &back["code"], &verifier).await;
    assert_eq!(status, 200);
    let token = first["access_token"].as_str().unwrap();
    let (status, again) = redeem(&server, &back["code"], &verifier).await;
    assert_eq!(
        (status, again["error"].as_str()),
        (400, Some("invalid_grant"))
    );
    let r = server
        .request("POST", "/graphql", Some(token))
        .json(&json!({"query": "{ __typename }"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "the first redemption's token is revoked");
}

#[tokio::test]
async fn pkce_cannot_be_downgraded() {
    let server = Server::start(CLIENTS);
    let verifier = pkce_verifier("downgrade");
    let mut browser = Browser::new();
    for extra in [
        vec![("code_challenge_method", "plain")],
        vec![("code_challenge_method", "s256")],
        vec![("code_challenge_method", "")],
    ] {
        let url = code_url(&server.base, SPA_CB, &[]).replace("&code_challenge_method=S256", "");
        let url = format!("{url}&{}", form_pairs(&extra));
        let page = browser.get(&url).await;
        assert_eq!(page.status, 302, "{extra:?}");
        assert_eq!(
            page.redirect_params()["error"],
            "invalid_request",
            "{extra:?}"
        );
    }
    // A code bound to an S256 challenge: no verifier, the challenge itself
    // (what `plain` would send), or another verifier all fail.
    let back = sign_in_for_code(
        &server.base,
        "spa",
        SPA_CB,
        "read",
        &verifier,
        ("reader", "reader-password"),
    )
    .await;
    for wrong in ["", &pkce_challenge(&verifier), &pkce_verifier("other")] {
        let (status, body) = redeem(&server, &back["code"], wrong).await;
        assert_eq!(status, 400, "{wrong:?}: {body}");
    }
}

fn form_pairs(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

/// Sign-ups from one address are throttled like failed sign-ins: past
/// the free ones, the sign-up page answers 429 with `Retry-After` and says
/// why, and no account is created.
#[tokio::test]
async fn sign_ups_from_one_address_are_throttled() {
    let server = Server::start(crate::identity::SIGN_UP);
    let verifier = pkce_verifier("many");
    let free = gatehouse_auth::FREE_SIGN_UPS_PER_ADDRESS;
    let mut last = None;
    // Past the free ones the delays double from 1 s: on a slow machine a
    // sign-up may outlast the first delays, never many.
    for i in 0..free + 6 {
        let page = crate::identity::sign_up(&server, &format!("bot{i}"), &verifier).await;
        if page.status != 302 {
            last = Some((i, page));
            break;
        }
    }
    let (i, page) = last.expect("a sign-up refused");
    assert!(i > free, "refused after {i}: {}", page.body);
    assert_eq!(page.status, 429, "{}", page.body);
    assert!(page.header("retry-after").is_some());
    assert!(
        page.body.contains("Too many accounts created"),
        "{}",
        page.body
    );
    // The refused account does not exist: it cannot sign in.
    let r = server
        .client
        .post(format!("{}/oauth/token", server.base))
        .basic_auth(crate::APP.0, Some(crate::APP.1))
        .form(&[
            ("grant_type", "password"),
            ("username", format!("bot{i}").as_str()),
            ("password", "a long enough password"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}

/// `http://127.0.0.1:PORT` → PORT.
fn port_of(base: &str) -> u16 {
    base.rsplit(':').next().unwrap().parse().unwrap()
}

fn graphiql_url(base: &str, redirect: &str, verifier: &str) -> String {
    let challenge = pkce_challenge(verifier);
    authorize_url(
        base,
        &[
            ("response_type", "code"),
            ("client_id", "graphiql"),
            ("redirect_uri", redirect),
            ("state", "st"),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
        ],
    )
}

#[tokio::test]
async fn graphiql_signs_in_only_on_its_own_page() {
    let server = Server::start("");
    let port = port_of(&server.base);
    let page = format!("{}/graphql", server.base);
    let other = if port == u16::MAX { port - 1 } else { port + 1 };
    let mut browser = Browser::new();
    // Another listener on this machine (another port, port 80, no port)
    // would receive the user's code and redeem it with its own PKCE: the
    // any-port rule of native apps is not the server's own page's.
    for stranger in [
        format!("http://127.0.0.1:{other}/graphql"),
        "http://127.0.0.1:80/graphql".to_string(),
        "http://127.0.0.1/graphql".to_string(),
        format!("http://[::1]:{other}/graphql"),
        format!("http://localhost:{other}/graphql"),
        format!("{page}/"),
    ] {
        let r = browser
            .get(&graphiql_url(&server.base, &stranger, &pkce_verifier("g")))
            .await;
        assert_eq!(r.status, 400, "{stranger}: {}", r.body);
        assert!(r.location().is_none(), "{stranger}");
        // The page says where GraphiQL signs in.
        assert!(r.body.contains(&page), "{stranger}: {}", r.body);
    }
    // The same page under the other loopback names, same port: signs in,
    // and the token endpoint serves that origin.
    for alias in [
        format!("http://localhost:{port}"),
        format!("http://[::1]:{port}"),
        server.base.clone(),
    ] {
        let verifier = pkce_verifier("alias");
        let redirect = format!("{alias}/graphql");
        let back = sign_in_for_code(
            &server.base,
            "graphiql",
            &redirect,
            "",
            &verifier,
            ("reader", "reader-password"),
        )
        .await;
        let r = server
            .client
            .post(format!("{}/oauth/token", server.base))
            .header("origin", &alias)
            .form(&[
                ("grant_type", "authorization_code"),
                ("client_id", "graphiql"),
                ("code", back["code"].as_str()),
                ("redirect_uri", redirect.as_str()),
                ("code_verifier", verifier.as_str()),
            ])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{alias}: {}", r.text().await.unwrap());
    }
}

/// A third-party public app: its users see the consent page.
const THIRD_PARTY: &str = r#"
[[bootstrap.clients]]
client_id = "tp"
public = true
grants = ["authorization_code"]
scopes = ["read"]
redirect_uris = ["https://tp.example/cb"]
"#;

const READER: [(&str, &str); 3] = [
    ("action", "sign_in"),
    ("username", "reader"),
    ("password", "reader-password"),
];

#[tokio::test]
async fn a_planted_csrf_cookie_is_replaced_and_refused() {
    let server = Server::start(CLIENTS);
    let action = format!("{}/oauth/authorize", server.base);
    let url = code_url(&server.base, SPA_CB, &[]);
    // On a plain-http issuer the cookie has no `__Host-` prefix: whoever
    // can plant cookies for the host plants a value of its own, and asks
    // the page for the field that goes with it.
    let planted = "planted-by-the-attacker";
    let mut attacker = Browser::new();
    attacker.set_cookie("gatehouse-csrf", planted);
    let own = attacker.get(&url).await;
    assert_eq!(own.status, 200);
    assert_ne!(
        attacker.cookie("gatehouse-csrf"),
        Some(planted),
        "the page replaces a value it did not mint"
    );
    // The victim's browser holds the planted value; the attacker's page
    // posts its form (the field the page gave the attacker): refused.
    let mut victim = Browser::new();
    victim.set_cookie("gatehouse-csrf", planted);
    let r = victim.submit(&action, &own, &READER).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.location().is_none());
    // Nor does a value shaped like a minted one pass.
    victim.set_cookie("gatehouse-csrf", "AAAA.AAAA");
    let r = victim.submit(&action, &own, &READER).await;
    assert_eq!(r.status, 403, "{}", r.body);
    // The victim's own page sets a cookie the server minted, and works.
    let page = victim.get(&url).await;
    assert_ne!(victim.cookie("gatehouse-csrf"), Some("AAAA.AAAA"));
    let r = victim.submit(&action, &page, &READER).await;
    assert_eq!(r.status, 302, "{}", r.body);
    assert!(r.redirect_params().contains_key("code"));
}

#[tokio::test]
async fn a_consent_ticket_is_spent_once_and_only_in_its_browser() {
    for server in Server::each_backend(&format!("{CLIENTS}{THIRD_PARTY}")).await {
        let backend = server.backend();
        let action = format!("{}/oauth/authorize", server.base);
        let challenge = pkce_challenge(&pkce_verifier("consent"));
        let url = authorize_url(
            &server.base,
            &[
                ("response_type", "code"),
                ("client_id", "tp"),
                ("redirect_uri", "https://tp.example/cb"),
                ("scope", "read"),
                ("state", "st"),
                ("code_challenge", challenge.as_str()),
                ("code_challenge_method", "S256"),
            ],
        );
        let mut user = Browser::new();
        let page = user.get(&url).await;
        let consent = user.submit(&action, &page, &READER).await;
        assert_eq!(consent.status, 200, "{backend}: {}", consent.body);
        let ticket = consent.hidden("ticket").unwrap();
        // Another browser (its own cookie and field) posts the ticket it
        // read off the user's page: refused, nothing redirected.
        let mut other = Browser::new();
        let other_page = other.get(&url).await;
        let r = other
            .submit(
                &action,
                &other_page,
                &[("action", "consent"), ("ticket", ticket.as_str())],
            )
            .await;
        assert_eq!(r.status, 400, "{backend}: {}", r.body);
        assert!(r.location().is_none(), "{backend}");
        // The user approves once: one code.
        let r = user
            .submit(&action, &consent, &[("action", "consent")])
            .await;
        assert_eq!(r.status, 302, "{backend}: {}", r.body);
        assert!(r.redirect_params().contains_key("code"), "{backend}");
        // The same ticket again: refused.
        for _ in 0..2 {
            let r = user
                .submit(&action, &consent, &[("action", "consent")])
                .await;
            assert_eq!(r.status, 400, "{backend}: {}", r.body);
            assert!(r.location().is_none(), "{backend}");
        }
    }
}

#[tokio::test]
async fn a_form_that_cannot_be_read_is_answered_with_a_page() {
    let server = Server::start(CLIENTS);
    let action = format!("{}/oauth/authorize", server.base);
    for (content_type, body) in [
        ("application/json", "{\"action\":\"sign_in\"}"),
        ("application/x-www-form-urlencoded", "csrf=a&csrf=b"),
        ("text/plain", "action=sign_in"),
    ] {
        let r = server
            .client
            .post(&action)
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{content_type} {body}");
        assert_eq!(
            r.headers()["content-type"],
            "text/html; charset=utf-8",
            "{content_type} {body}"
        );
        assert!(r.headers().get("content-security-policy").is_some());
        let text = r.text().await.unwrap();
        assert!(text.contains("Invalid form"), "{text}");
    }
}
