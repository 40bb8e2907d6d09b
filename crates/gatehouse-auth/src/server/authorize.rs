//! The authorization endpoint of the code flow (RFC 6749 §4.1.1-§4.1.2,
//! RFC 7636, RFC 9207, RFC 9700 §2.1): which requests are valid and where
//! their errors go, the sign-in and consent steps, the sign-in pages' CSRF
//! tokens, and the authorization response. No HTTP and no HTML here: the
//! endpoint crate renders what these functions decide.
//!
//! There is no server-side session: every authorization asks for the
//! user's credentials, and nothing of a request is kept between the pages.
//! Each POST carries the request's parameters again and they are validated
//! again ([`AuthServer::authorize_request`]); what the sign-in step
//! established (who signed in, when, with which scope) travels to the
//! consent step in a ticket MACed with the server's forms key, bound to
//! the request and to the browser's CSRF cookie, and spent on its first
//! use ([`AuthServer::consent_ticket`]).

use std::fmt;

use subtle::ConstantTimeEq;

use super::*;
use crate::flows::Verification;
use crate::model::{CodeRecord, GRAPHIQL_CLIENT_ID};
use crate::oidc::SCOPE_OPENID;
use crate::redirect::redirect_uri_matches;

/// How long an authorization code may be redeemed (RFC 6749 §4.1.2
/// recommends at most 10 minutes; the code only has to cross one redirect).
pub const CODE_TTL: i64 = 60;
/// How long a redeemed or expired code's record is kept, so a late second
/// use is still recognised and revokes what the first use issued.
pub const CODE_REPLAY_MEMORY: i64 = 3600;
/// How long a consent ticket stays valid after the user signed in.
pub const CONSENT_TTL: i64 = 600;
/// Under which key a spent consent ticket is recorded in the replay table
/// of OAuth 1.0 nonces ([`crate::AuthRepo::insert_nonce`]: a unique key,
/// so every instance on one database refuses the second use). The space
/// keeps it apart from every consumer's key (names are visible ASCII).
const SPENT_CONSENT: &str = "consent ticket";
/// Longest `state` or `nonce` accepted: they come back in a URL or a token.
pub const MAX_STATE: usize = 1024;
/// Shortest password self-service sign-up accepts (NIST SP 800-63B asks
/// for at least 8; a user-chosen one guarding data deserves more).
pub const MIN_SIGN_UP_PASSWORD: usize = 12;

/// RFC 7636 §4.1: `code_verifier` and (for S256) `code_challenge` are
/// 43 to 128 unreserved characters.
fn pkce_syntax_ok(v: &str) -> bool {
    (43..=128).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

/// The parameters of an authorization request as received (query string
/// of the GET, hidden fields of the pages' POSTs). Empty values count as
/// omitted (RFC 6749 §3.1).
#[derive(Debug, Clone, Default)]
pub struct AuthorizeParams {
    /// `response_type`: `code`.
    pub response_type: Option<String>,
    /// `client_id`.
    pub client_id: Option<String>,
    /// `redirect_uri` (required: RFC 9700 §2.1 wants it exact, and it is
    /// what the token request must repeat).
    pub redirect_uri: Option<String>,
    /// `scope`.
    pub scope: Option<String>,
    /// `state`, returned unchanged.
    pub state: Option<String>,
    /// `code_challenge` (RFC 7636 §4.3).
    pub code_challenge: Option<String>,
    /// `code_challenge_method`: only `S256`.
    pub code_challenge_method: Option<String>,
    /// OpenID Connect `nonce`.
    pub nonce: Option<String>,
    /// OpenID Connect `prompt`: `none`, `login`, `consent`, `select_account`.
    pub prompt: Option<String>,
    /// `response_mode`: only `query`.
    pub response_mode: Option<String>,
}

impl AuthorizeParams {
    /// The parameters as name/value pairs, to carry them in a form.
    pub fn pairs(&self) -> Vec<(&'static str, &str)> {
        [
            ("response_type", &self.response_type),
            ("client_id", &self.client_id),
            ("redirect_uri", &self.redirect_uri),
            ("scope", &self.scope),
            ("state", &self.state),
            ("code_challenge", &self.code_challenge),
            ("code_challenge_method", &self.code_challenge_method),
            ("nonce", &self.nonce),
            ("prompt", &self.prompt),
            ("response_mode", &self.response_mode),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.as_deref().filter(|v| !v.is_empty()).map(|v| (k, v)))
        .collect()
    }

    /// Sets the parameter `name` (one of [`AuthorizeParams::pairs`]'s
    /// names); `false` for any other name.
    pub fn set(&mut self, name: &str, value: String) -> bool {
        let slot = match name {
            "response_type" => &mut self.response_type,
            "client_id" => &mut self.client_id,
            "redirect_uri" => &mut self.redirect_uri,
            "scope" => &mut self.scope,
            "state" => &mut self.state,
            "code_challenge" => &mut self.code_challenge,
            "code_challenge_method" => &mut self.code_challenge_method,
            "nonce" => &mut self.nonce,
            "prompt" => &mut self.prompt,
            "response_mode" => &mut self.response_mode,
            _ => return false,
        };
        *slot = Some(value);
        true
    }
}

/// A valid authorization request: the client, where to send the user back,
/// and what was asked for.
#[derive(Debug, Clone)]
pub struct AuthorizeRequest {
    /// The client, as registered.
    pub client: ClientRecord,
    /// The `redirect_uri` as sent (it matched a registered one).
    pub redirect_uri: String,
    /// `scope` as sent (checked; narrowed to the user's at sign-in).
    pub scope: Option<String>,
    /// `state`, returned unchanged.
    pub state: Option<String>,
    /// The S256 `code_challenge`.
    pub code_challenge: String,
    /// OpenID Connect `nonce`.
    pub nonce: Option<String>,
    /// `prompt=consent`: show the consent page even to a first-party client.
    pub force_consent: bool,
    /// `prompt=none`: no page may be shown (and without a session one
    /// always would be).
    pub no_prompt: bool,
}

impl AuthorizeRequest {
    /// Whether the user must approve the client after signing in: a
    /// third-party client, or `prompt=consent`.
    pub fn needs_consent(&self) -> bool {
        self.force_consent || !self.client.first_party
    }

    /// What a consent ticket is bound to: every parameter that decides what
    /// the code grants and where it goes.
    fn digest(&self) -> [u8; 32] {
        let mut h = sha2::Sha256::new();
        for part in [
            Some(self.client.client_id.as_str()),
            Some(self.redirect_uri.as_str()),
            self.scope.as_deref(),
            self.state.as_deref(),
            Some(self.code_challenge.as_str()),
            self.nonce.as_deref(),
        ] {
            // Length-prefixed, so no two requests encode alike.
            let v = part.unwrap_or("");
            h.update((v.len() as u64).to_be_bytes());
            h.update([u8::from(part.is_some())]);
            h.update(v.as_bytes());
        }
        h.finalize().into()
    }
}

/// Why an authorization request cannot go on, and where the user learns it.
#[derive(Debug)]
pub enum AuthorizeError {
    /// No trusted redirect URI is known (unknown client, missing or
    /// unregistered `redirect_uri`), or the response mode is unsupported:
    /// shown on the page with 400, never redirected (RFC 6749 §4.1.2.1).
    Page(Error),
    /// Sent back to the client's registered redirect URI with `error`,
    /// `state` and `iss` ([`AuthServer::authorization_error_redirect`]).
    Redirect {
        /// The (registered) redirect URI.
        redirect_uri: String,
        /// The request's `state`.
        state: Option<String>,
        /// The error.
        error: AuthorizeErrorCode,
    },
}

/// RFC 6749 §4.1.2.1 and OpenID Connect Core §3.1.2.6 error codes of the
/// authorization response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthorizeErrorCode {
    /// Malformed request (missing or bad PKCE, bad `prompt`, ...).
    InvalidRequest(&'static str),
    /// The client may not use the code grant.
    UnauthorizedClient(&'static str),
    /// The user declined.
    AccessDenied(&'static str),
    /// `response_type` other than `code`.
    UnsupportedResponseType(&'static str),
    /// Nothing asked for may be granted.
    InvalidScope(&'static str),
    /// The server failed.
    ServerError(&'static str),
    /// `prompt=none`, and there is no session to sign in from.
    LoginRequired(&'static str),
}

impl AuthorizeErrorCode {
    /// The wire string.
    pub fn code(self) -> &'static str {
        match self {
            Self::InvalidRequest(_) => "invalid_request",
            Self::UnauthorizedClient(_) => "unauthorized_client",
            Self::AccessDenied(_) => "access_denied",
            Self::UnsupportedResponseType(_) => "unsupported_response_type",
            Self::InvalidScope(_) => "invalid_scope",
            Self::ServerError(_) => "server_error",
            Self::LoginRequired(_) => "login_required",
        }
    }

    /// The `error_description`.
    pub fn description(self) -> &'static str {
        match self {
            Self::InvalidRequest(d)
            | Self::UnauthorizedClient(d)
            | Self::AccessDenied(d)
            | Self::UnsupportedResponseType(d)
            | Self::InvalidScope(d)
            | Self::ServerError(d)
            | Self::LoginRequired(d) => d,
        }
    }
}

impl fmt::Display for AuthorizeErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// Who signed in on the sign-in page, and what they may grant the client.
#[derive(Debug, Clone)]
pub struct SignedIn {
    /// The user name.
    pub username: String,
    /// When the credentials were checked (OIDC `auth_time`).
    pub auth_time: i64,
    /// The scope the code will carry: asked ∩ client's ∩ user's, plus
    /// `openid` when asked.
    pub scope: Scopes,
    /// The identity provider (`[[auth.providers]]` id) the user signed in
    /// through; `None` after a password.
    pub idp: Option<String>,
}

/// The CSRF token pair of the sign-in pages: for the cookie, a random
/// value with the server's MAC of it (so a value the server did not mint
/// is never taken), and for the form's hidden field the MAC of that cookie.
#[derive(Clone)]
pub struct CsrfPair {
    /// The cookie value.
    pub cookie: String,
    /// The hidden field value.
    pub field: String,
}

impl fmt::Debug for CsrfPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CsrfPair(<redacted>)")
    }
}

impl AuthServer {
    /// Validates an authorization request (RFC 6749 §4.1.1, RFC 7636
    /// §4.3), in the order that decides where its errors go: first the
    /// client and the redirect URI (unknown, missing or unregistered: the
    /// page), then everything else (the redirect URI). Every POST of the
    /// sign-in pages calls this again with the parameters it carries.
    pub async fn authorize_request(
        &self,
        p: &AuthorizeParams,
    ) -> Result<AuthorizeRequest, AuthorizeError> {
        let page = |d: &'static str| AuthorizeError::Page(Error::invalid_request(d));
        let Some(client_id) = opt(p.client_id.as_deref()) else {
            return Err(page("the `client_id` parameter is required"));
        };
        let client = match self.lookup_client(client_id).await {
            Ok(Some(c)) => c,
            Ok(None) => return Err(page("unknown client")),
            Err(e) => return Err(AuthorizeError::Page(e)),
        };
        let Some(redirect_uri) = opt(p.redirect_uri.as_deref()) else {
            return Err(page("the `redirect_uri` parameter is required"));
        };
        if !redirect_uri_matches(&client, redirect_uri) {
            // GraphiQL sends its own address: opened anywhere but this
            // server's page, say where the page is.
            if client.client_id == GRAPHIQL_CLIENT_ID
                && let Some(home) = client.redirect_uris.first()
            {
                return Err(AuthorizeError::Page(Error::invalid_request(format!(
                    "GraphiQL signs in only on this server's own page: open it at {home}"
                ))));
            }
            return Err(page("the `redirect_uri` is not registered for this client"));
        }
        // Another response mode is an error on the page.
        if let Some(mode) = opt(p.response_mode.as_deref())
            && mode != "query"
        {
            return Err(page("only `response_mode=query` is supported"));
        }
        let redirect_uri = redirect_uri.to_string();
        let state = opt(p.state.as_deref()).map(str::to_string);
        if state.as_ref().is_some_and(|s| s.len() > MAX_STATE) {
            // Too long to send back: shown here rather than echoed.
            return Err(page("the `state` parameter is too long"));
        }
        let redirect = |error| AuthorizeError::Redirect {
            redirect_uri: redirect_uri.clone(),
            state: state.clone(),
            error,
        };
        if !client.allows_grant(Grant::AuthorizationCode) {
            return Err(redirect(AuthorizeErrorCode::UnauthorizedClient(
                "this client may not use the authorization code grant",
            )));
        }
        match opt(p.response_type.as_deref()) {
            Some("code") => {}
            None => {
                return Err(redirect(AuthorizeErrorCode::InvalidRequest(
                    "the `response_type` parameter is required",
                )));
            }
            Some(_) => {
                return Err(redirect(AuthorizeErrorCode::UnsupportedResponseType(
                    "only `response_type=code` is supported",
                )));
            }
        }
        // RFC 9700 §2.1.1: PKCE for every client; S256 only (a missing
        // method means `plain`, RFC 7636 §4.3).
        let Some(challenge) = opt(p.code_challenge.as_deref()) else {
            return Err(redirect(AuthorizeErrorCode::InvalidRequest(
                "PKCE is required: send `code_challenge` with `code_challenge_method=S256`",
            )));
        };
        if opt(p.code_challenge_method.as_deref()) != Some("S256") {
            return Err(redirect(AuthorizeErrorCode::InvalidRequest(
                "only `code_challenge_method=S256` is supported",
            )));
        }
        if !pkce_syntax_ok(challenge) {
            return Err(redirect(AuthorizeErrorCode::InvalidRequest(
                "`code_challenge` must be 43 to 128 unreserved characters",
            )));
        }
        let nonce = opt(p.nonce.as_deref()).map(str::to_string);
        if nonce.as_ref().is_some_and(|n| n.len() > MAX_STATE) {
            return Err(redirect(AuthorizeErrorCode::InvalidRequest(
                "the `nonce` parameter is too long",
            )));
        }
        let (mut force_consent, mut no_prompt, mut other) = (false, false, false);
        for v in opt(p.prompt.as_deref())
            .unwrap_or("")
            .split(' ')
            .filter(|v| !v.is_empty())
        {
            match v {
                "none" => no_prompt = true,
                "consent" => force_consent = true,
                "login" | "select_account" => other = true,
                _ => {
                    return Err(redirect(AuthorizeErrorCode::InvalidRequest(
                        "`prompt` takes none, login, consent or select_account",
                    )));
                }
            }
        }
        // OIDC Core §3.1.2.1: `none` with any other value is an error.
        if no_prompt && (force_consent || other) {
            return Err(redirect(AuthorizeErrorCode::InvalidRequest(
                "`prompt=none` cannot be combined with other values",
            )));
        }
        let scope = opt(p.scope.as_deref()).map(str::to_string);
        if let Some(s) = &scope
            && Scopes::parse(s).is_err()
        {
            return Err(redirect(AuthorizeErrorCode::InvalidScope(
                "malformed scope value",
            )));
        }
        Ok(AuthorizeRequest {
            client,
            redirect_uri,
            scope,
            state,
            code_challenge: challenge.to_string(),
            nonce,
            force_consent,
            no_prompt,
        })
    }

    /// The scope a code for `req` carries when `user` approves it: the
    /// password grant's rule (what was asked, narrowed to what the client
    /// and the user both allow, identity scopes needing only the client;
    /// `invalid_scope` when something was asked and none of it may be
    /// granted).
    fn code_scope(&self, req: &AuthorizeRequest, user: &UserRecord) -> Result<Scopes> {
        let allowed = crate::oidc::user_scope_ceiling(&req.client.scopes, &user.scopes);
        Self::narrow_scope(req.scope.as_deref(), &allowed)
    }

    /// The sign-in step: checks the user's password through the
    /// failed-login throttle ([`AuthServer::check_user_password`]: a wrong
    /// user name and a wrong password are the same `invalid_grant`, a
    /// throttled login `TooManyRequests`), then the scope the code would
    /// carry (`invalid_scope` when nothing asked for may be granted).
    pub async fn sign_in(
        &self,
        req: &AuthorizeRequest,
        username: &str,
        password: &str,
        from: Option<IpAddr>,
    ) -> Result<SignedIn> {
        let user = self.check_user_password(username, password, from).await?;
        self.signed_in(req, &user)
    }

    /// Self-service sign-up (`[auth] sign_up`): registers `username` with
    /// `password`, `email` (when the account type has the field) and the
    /// configured `sign_up_scopes`, then signs them in for `req`, or, when
    /// the address is to be confirmed, answers the "check your e-mail"
    /// page ([`AuthServer::sign_up_with_address`]). A refused attempt
    /// counts as a failed login of the address; an attempt with a
    /// well-formed name and password counts as a sign-up of the address
    /// ([`crate::LoginThrottle::take_sign_up`]): past the free ones,
    /// `TooManyRequests`. The name must be free among users, clients and
    /// consumers, and never used by a removed one
    /// ([`crate::AuthRepo::register`]).
    pub async fn sign_up(
        self: &Arc<Self>,
        req: &AuthorizeRequest,
        username: &str,
        email: &str,
        password: &str,
        return_to: ReturnTo,
        from: Option<IpAddr>,
    ) -> Result<SignedUp> {
        if !self.config.sign_up {
            return Err(Error::invalid_request("self-service sign-up is off"));
        }
        let now = self.now();
        self.logins
            .check_address(from, now)
            .map_err(too_many_failures)?;
        let refuse = |msg: crate::error::Description| {
            self.logins.failed_address(from, self.now());
            Err(Error::InvalidInput(msg))
        };
        if password.chars().count() < MIN_SIGN_UP_PASSWORD {
            return refuse("the password must have at least 12 characters".into());
        }
        // The cheap checks first, so that a typo costs neither a sign-up
        // of the address nor a password hash.
        if let Err(Error::InvalidInput(msg)) =
            crate::admin::check_new_name(crate::IdentityKind::User, username)
        {
            return refuse(msg);
        }
        let address = match self.sign_up_address(email) {
            Ok(a) => a,
            Err(Error::InvalidInput(msg)) => return refuse(msg),
            Err(e) => return Err(e),
        };
        self.logins.take_sign_up(from, now).map_err(|wait| {
            Error::TooManyRequests(
                "too many accounts were created from this address; retry later".into(),
                wait,
            )
        })?;
        if let Some(address) = &address
            && self.verification() == Verification::Required
        {
            return self
                .sign_up_pending(username, address, password, return_to, from)
                .await;
        }
        let added = match self
            .admin()
            .add_account(
                username,
                None,
                address.as_deref(),
                password,
                &self.config.sign_up_scopes,
                &Claims::new(),
            )
            .await
        {
            Ok(added) => added,
            Err(Error::Conflict(msg)) if msg.contains("e-mail") => return refuse(msg),
            Err(Error::Conflict(_)) => return refuse("this user name is not available".into()),
            Err(Error::InvalidInput(msg)) => return refuse(msg),
            Err(e) => return Err(e),
        };
        tracing::info!(?from, "user signed up");
        if let Some(address) = &address
            && self.verification() == Verification::Optional
        {
            let flow = self
                .send_verification(&added.sub, &added.username, address, return_to)
                .await?;
            return Ok(SignedUp::CheckEmail(flow));
        }
        let Some(user) = self.user(&added.sub).await? else {
            return Err(Error::server("a user just signed up is missing"));
        };
        Ok(SignedUp::SignedIn(self.signed_in(req, &user)?))
    }

    /// What signing in as `user` (whose credentials were just checked, or
    /// who was just registered) grants for `req`.
    pub(crate) fn signed_in(&self, req: &AuthorizeRequest, user: &UserRecord) -> Result<SignedIn> {
        Ok(SignedIn {
            username: user.username.clone(),
            auth_time: self.now(),
            scope: self.code_scope(req, user)?,
            idp: None,
        })
    }

    /// A ticket carrying `signed` from the sign-in page to the consent
    /// page, bound to `req` and to the browser (`browser`: its CSRF
    /// cookie, checked by the POST that signed in), valid [`CONSENT_TTL`]
    /// seconds and once ([`AuthServer::open_consent_ticket`]):
    /// `payload.mac`, both base64url, the MAC made with the forms key.
    pub fn consent_ticket(
        &self,
        req: &AuthorizeRequest,
        signed: &SignedIn,
        browser: &str,
    ) -> String {
        let payload = json!({
            "u": signed.username,
            "t": signed.auth_time,
            "s": signed.scope.to_string(),
            "e": self.now().saturating_add(CONSENT_TTL),
            "r": crate::b64(&req.digest()),
            "b": crate::b64(&sha2::Sha256::digest(browser.as_bytes())),
            "n": token_string(self.random.as_ref(), 16),
            "i": signed.idp,
        })
        .to_string();
        let mac = self.cipher.form_mac("consent", payload.as_bytes());
        format!("{}.{}", crate::b64(payload.as_bytes()), crate::b64(&mac))
    }

    /// Opens a ticket of [`AuthServer::consent_ticket`] for `req`, posted
    /// by the browser whose CSRF cookie is `browser`: its MAC, its expiry,
    /// that it was made for this very request and this browser, that the
    /// user still exists, and that it was not used before (it is spent
    /// here, in the database, so a second post gets nothing on any
    /// instance). Anything else is `invalid_request`.
    pub async fn open_consent_ticket(
        &self,
        req: &AuthorizeRequest,
        ticket: &str,
        browser: &str,
    ) -> Result<SignedIn> {
        use base64::Engine;
        let bad = || Error::invalid_request("the sign-in has expired; sign in again");
        let (payload, mac) = ticket.split_once('.').ok_or_else(bad)?;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let payload = b64.decode(payload).map_err(|_| bad())?;
        let mac = b64.decode(mac).map_err(|_| bad())?;
        let expected = self.cipher.form_mac("consent", &payload);
        if !bool::from(expected[..].ct_eq(&mac)) {
            return Err(bad());
        }
        let v: Value = serde_json::from_slice(&payload).map_err(|_| bad())?;
        let (
            Some(username),
            Some(auth_time),
            Some(scope),
            Some(exp),
            Some(digest),
            Some(bound),
            Some(id),
        ) = (
            v["u"].as_str(),
            v["t"].as_i64(),
            v["s"].as_str(),
            v["e"].as_i64(),
            v["r"].as_str(),
            v["b"].as_str(),
            v["n"].as_str(),
        )
        else {
            return Err(bad());
        };
        let now = self.now();
        if exp <= now || digest != crate::b64(&req.digest()) {
            return Err(bad());
        }
        // Another browser's ticket (copied out of its page) approves nothing.
        let this_browser = crate::b64(&sha2::Sha256::digest(browser.as_bytes()));
        if !bool::from(bound.as_bytes().ct_eq(this_browser.as_bytes())) {
            return Err(bad());
        }
        // A user removed meanwhile gets nothing.
        if self.user(username).await?.is_none() {
            return Err(bad());
        }
        let scope = Scopes::parse(scope).map_err(|_| bad())?;
        // Last, so only a ticket that would be honoured is spent.
        if !self.repo.insert_nonce(SPENT_CONSENT, id, exp, now).await? {
            return Err(Error::invalid_request(
                "this sign-in was already used; sign in again",
            ));
        }
        Ok(SignedIn {
            username: username.to_string(),
            auth_time,
            scope,
            idp: v["i"].as_str().map(str::to_string),
        })
    }

    /// A new CSRF pair for the sign-in pages: a cookie value the server
    /// mints (random, with its MAC) and the hidden field that goes with it.
    /// A page served to a browser that already holds a cookie this server
    /// minted reuses it ([`AuthServer::csrf_field`]).
    pub fn csrf_pair(&self) -> CsrfPair {
        let random = token_string(self.random.as_ref(), 32);
        let mac = crate::b64(&self.cipher.form_mac("csrf-cookie", random.as_bytes()));
        let cookie = format!("{random}.{mac}");
        let field = self.field_of(&cookie);
        CsrfPair { cookie, field }
    }

    /// The hidden field value that goes with the cookie value `cookie`;
    /// `None` when the server did not mint that cookie (a value planted in
    /// the browser by someone else gets no field, and the page sets a new
    /// cookie instead).
    pub fn csrf_field(&self, cookie: &str) -> Option<String> {
        self.csrf_cookie_minted(cookie)
            .then(|| self.field_of(cookie))
    }

    fn field_of(&self, cookie: &str) -> String {
        crate::b64(&self.cipher.form_mac("csrf", cookie.as_bytes()))
    }

    /// Whether `cookie` is a value of [`AuthServer::csrf_pair`]: the MAC
    /// of its random part under the forms key.
    fn csrf_cookie_minted(&self, cookie: &str) -> bool {
        if cookie.len() > 128 {
            return false;
        }
        let Some((random, mac)) = cookie.split_once('.') else {
            return false;
        };
        if random.is_empty() {
            return false;
        }
        let expected = crate::b64(&self.cipher.form_mac("csrf-cookie", random.as_bytes()));
        bool::from(expected.as_bytes().ct_eq(mac.as_bytes()))
    }

    /// Whether a POST of the sign-in pages carries a cookie this server
    /// minted and a CSRF field matching it (signed double submit: another
    /// site can neither read the cookie nor make a field for one it
    /// planted, and a planted value the server did not mint is refused).
    pub fn csrf_ok(&self, cookie: Option<&str>, field: Option<&str>) -> bool {
        let (Some(cookie), Some(field)) = (cookie, field) else {
            return false;
        };
        let Some(expected) = self.csrf_field(cookie) else {
            return false;
        };
        bool::from(expected.as_bytes().ct_eq(field.as_bytes()))
    }

    /// Issues a code for `req` to the user who signed in and returns the
    /// URL to send the browser to: the redirect URI with `code`, `state`
    /// and `iss` (RFC 6749 §4.1.2, RFC 9207 §2).
    pub async fn issue_code(&self, req: &AuthorizeRequest, signed: &SignedIn) -> Result<String> {
        let code = token_string(self.random.as_ref(), 32);
        let now = self.now();
        self.repo
            .insert_code(&CodeRecord {
                id: secrets::token_id(&code),
                client_id: req.client.client_id.clone(),
                redirect_uri: req.redirect_uri.clone(),
                code_challenge: req.code_challenge.clone(),
                scope: signed.scope.to_vec(),
                username: signed.username.clone(),
                nonce: req.nonce.clone(),
                auth_time: signed.auth_time,
                issued_at: now,
                expires_at: now.saturating_add(CODE_TTL),
                used_at: None,
                family_id: self.new_id(),
                idp: signed.idp.clone(),
            })
            .await?;
        Ok(self.authorization_redirect(
            &req.redirect_uri,
            &[("code", code.as_str())],
            req.state.as_deref(),
        ))
    }

    /// The URL of an authorization error response (RFC 6749 §4.1.2.1).
    pub fn authorization_error_redirect(
        &self,
        redirect_uri: &str,
        state: Option<&str>,
        error: AuthorizeErrorCode,
    ) -> String {
        self.authorization_redirect(
            redirect_uri,
            &[
                ("error", error.code()),
                ("error_description", error.description()),
            ],
            state,
        )
    }

    /// `redirect_uri` with `params`, `state` and `iss` added to its query
    /// (kept: RFC 6749 §3.1.2 allows one), the one place an authorization
    /// response is built.
    fn authorization_redirect(
        &self,
        redirect_uri: &str,
        params: &[(&str, &str)],
        state: Option<&str>,
    ) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (k, v) in params {
            q.append_pair(k, v);
        }
        if let Some(s) = state {
            q.append_pair("state", s);
        }
        q.append_pair("iss", &self.config.issuer);
        let q = q.finish();
        let sep = match redirect_uri.split_once('?') {
            None => "?",
            Some((_, "")) => "",
            Some(_) if redirect_uri.ends_with('&') => "",
            Some(_) => "&",
        };
        format!("{redirect_uri}{sep}{q}")
    }

    /// RFC 6749 §4.1.3 with RFC 7636 §4.6: redeems `code` for `client`.
    /// The code must exist, be unexpired, have been issued to this client
    /// for this `redirect_uri`, and `code_verifier` must hash to its
    /// challenge; anything else is `invalid_grant`. A code presented after
    /// it was redeemed is refused and revokes every token the first
    /// redemption issued (RFC 6749 §4.1.2).
    pub async fn authorization_code_grant(
        &self,
        client: &ClientRecord,
        code: Option<&str>,
        redirect_uri: Option<&str>,
        code_verifier: Option<&str>,
    ) -> Result<TokenResponse> {
        if !client.allows_grant(Grant::AuthorizationCode) {
            return Err(Error::UnauthorizedClient(
                "this client may not use the authorization code grant".into(),
            ));
        }
        let (Some(code), Some(redirect_uri)) = (opt(code), opt(redirect_uri)) else {
            return Err(Error::invalid_request(
                "the authorization_code grant needs `code` and `redirect_uri`",
            ));
        };
        let Some(verifier) = opt(code_verifier) else {
            return Err(Error::invalid_request(
                "PKCE is required: send the `code_verifier`",
            ));
        };
        if !pkce_syntax_ok(verifier) {
            return Err(Error::invalid_request(
                "`code_verifier` must be 43 to 128 unreserved characters",
            ));
        }
        let invalid = || Error::invalid_grant("the authorization code is invalid or expired");
        let id = secrets::token_id(code);
        let now = self.now();
        let Some(record) = self.repo.get_code(&id).await? else {
            return Err(invalid());
        };
        // A code is bound to its client: another client's reads as unknown
        // (and is not spent by the attempt).
        if record.client_id != client.client_id {
            return Err(invalid());
        }
        if record.used_at.is_some() {
            self.code_replayed(&record).await?;
            return Err(invalid());
        }
        if record.expires_at <= now || record.redirect_uri != redirect_uri {
            return Err(invalid());
        }
        let computed = crate::b64(&sha2::Sha256::digest(verifier.as_bytes()));
        if !bool::from(computed.as_bytes().ct_eq(record.code_challenge.as_bytes())) {
            return Err(Error::invalid_grant(
                "the PKCE code_verifier does not match",
            ));
        }
        if !self.repo.use_code(&id, now).await? {
            // Lost a race with another redemption: that is a replay too.
            self.code_replayed(&record).await?;
            return Err(invalid());
        }
        let Some(user) = self.user(&record.username).await? else {
            return Err(invalid());
        };
        let scope = Scopes::from_list(&record.scope);
        let with_refresh = client.allows_grant(Grant::RefreshToken);
        let mut tokens = self
            .issue_pair_in(
                &user.username,
                Some(&user.username),
                client,
                &scope,
                with_refresh,
                &user.claims,
                record.family_id.clone(),
                record.idp.as_deref(),
            )
            .await?;
        if scope.contains(SCOPE_OPENID) {
            // OpenID Connect Core §3.1.3.3: the `id_token` of the code flow.
            tokens.id_token = Some(
                self.user_id_token(
                    client,
                    &user.username,
                    &tokens.scope,
                    record.auth_time,
                    record.nonce.as_deref(),
                    &tokens.access_token,
                    record.idp.as_deref(),
                )
                .await?,
            );
        }
        Ok(tokens)
    }

    /// A redeemed code was presented again: whoever holds it is not to be
    /// trusted, so the tokens of its first redemption are revoked.
    async fn code_replayed(&self, record: &CodeRecord) -> Result<()> {
        let n = self.repo.revoke_family(&record.family_id).await?;
        self.revoked();
        tracing::warn!(
            client_id = %record.client_id,
            revoked = n,
            "authorization code presented again: tokens issued from it revoked"
        );
        Ok(())
    }
}
