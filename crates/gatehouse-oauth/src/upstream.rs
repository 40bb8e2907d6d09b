//! The client side of signing in through other identity providers:
//! OpenID Connect providers through the `openidconnect`
//! crate (discovery, JWKS, ID token validation) and GitHub through its
//! OAuth 2.0 endpoints and REST API. Every call goes through one HTTP
//! client ([`ProviderHttp`]): 10 s per call, at most 1 MiB read, no
//! redirects followed. Decisions: `docs/design/federation.md`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use openidconnect::core::{
    CoreAuthenticationFlow, CoreClient, CoreJwsSigningAlgorithm, CoreProviderMetadata,
    CoreUserInfoClaims,
};
use openidconnect::{
    AccessToken, AsyncHttpClient, AuthorizationCode, ClaimsVerificationError, ClientId,
    ClientSecret, CsrfToken, HttpRequest, HttpResponse, IssuerUrl, Nonce, OAuth2TokenResponse as _,
    PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope, SignatureVerificationError,
    SubjectIdentifier, TokenResponse as _,
};
use serde_json::Value;
use tokio::sync::Mutex;

use gatehouse_auth::{LinkMode, ProviderPolicy, ProviderReturn, ProviderStart, UpstreamIdentity};

/// Longest a call to a provider may take, connection to last byte.
pub const PROVIDER_TIMEOUT: Duration = Duration::from_secs(10);
/// Most bytes read from one answer of a provider.
pub const PROVIDER_MAX_BODY: usize = 1024 * 1024;
/// How long a provider's discovery document and keys are reused.
const DISCOVERY_TTL: Duration = Duration::from_secs(600);

/// What kind of provider, and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderKind {
    /// Any OpenID Connect provider, found by discovery under `issuer`.
    Oidc {
        /// The issuer URL (`https`, or `http` on a loopback address).
        issuer: String,
    },
    /// GitHub: OAuth 2.0 at `web_url`, the REST API at `api_url`.
    Github {
        /// `https://github.com` unless overridden.
        web_url: String,
        /// `https://api.github.com` unless overridden.
        api_url: String,
    },
}

/// One `[[auth.providers]]` entry, as the endpoints use it.
#[derive(Clone, PartialEq, Eq)]
pub struct ProviderConfig {
    /// `id`: in the URLs, the `idp` claim and the identities.
    pub id: String,
    /// `name`: on the button and the pages.
    pub name: String,
    /// OpenID Connect or GitHub.
    pub kind: ProviderKind,
    /// This server's client id there.
    pub client_id: String,
    /// Its secret there.
    pub client_secret: String,
    /// Scopes asked for (besides `openid`, which OpenID Connect always gets).
    pub scopes: Vec<String>,
    /// Whether its "verified" is taken for an address.
    pub trust_email: bool,
    /// What a new identity whose address matches an account does.
    pub link: LinkMode,
}

impl fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .field("scopes", &self.scopes)
            .field("trust_email", &self.trust_email)
            .field("link", &self.link)
            .finish_non_exhaustive()
    }
}

impl ProviderConfig {
    /// What the authorization server decides with.
    pub fn policy(&self) -> ProviderPolicy {
        ProviderPolicy {
            id: self.id.clone(),
            name: self.name.clone(),
            trust_email: self.trust_email,
            link: self.link,
        }
    }
}

/// Why a provider's part failed. Both are logged with their cause; the
/// page names the provider and says which.
#[derive(Debug)]
pub(crate) enum UpstreamError {
    /// Down, slow, or answering nonsense.
    Unavailable(String),
    /// Answered, but what it said cannot be trusted (an ID token that
    /// fails a check, a mismatched `iss`) or refused the sign-in.
    Refused(String),
}

/// An HTTP failure of a call to a provider.
#[derive(Debug)]
pub(crate) struct HttpError(String);

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HttpError {}

/// The one HTTP client of every call to a provider.
#[derive(Debug, Clone)]
pub(crate) struct ProviderHttp {
    client: reqwest::Client,
}

impl ProviderHttp {
    fn new() -> Self {
        let client = reqwest::Client::builder()
            .timeout(PROVIDER_TIMEOUT)
            .connect_timeout(PROVIDER_TIMEOUT)
            // A redirect would take the call somewhere the operator never
            // named (and the `openidconnect` crate asks for none).
            .redirect(reqwest::redirect::Policy::none())
            .user_agent("gatehouse")
            .build()
            .unwrap_or_default();
        Self { client }
    }

    /// Sends `request`, reading at most [`PROVIDER_MAX_BODY`] of the
    /// answer, within [`PROVIDER_TIMEOUT`].
    async fn send(&self, request: HttpRequest) -> Result<HttpResponse, HttpError> {
        let call =
            async {
                let request = reqwest::Request::try_from(request)
                    .map_err(|e| HttpError(format!("building the request: {e}")))?;
                let url = request.url().clone();
                let mut resp = self.client.execute(request).await.map_err(|e| {
                    HttpError(format!("{}: {}", without_query(&url), e.without_url()))
                })?;
                if resp
                    .content_length()
                    .is_some_and(|n| n > PROVIDER_MAX_BODY as u64)
                {
                    return Err(HttpError(format!(
                        "{}: the answer is larger than {PROVIDER_MAX_BODY} bytes",
                        without_query(&url)
                    )));
                }
                let mut body = Vec::new();
                while let Some(chunk) = resp.chunk().await.map_err(|e| {
                    HttpError(format!("{}: {}", without_query(&url), e.without_url()))
                })? {
                    if body.len() + chunk.len() > PROVIDER_MAX_BODY {
                        return Err(HttpError(format!(
                            "{}: the answer is larger than {PROVIDER_MAX_BODY} bytes",
                            without_query(&url)
                        )));
                    }
                    body.extend_from_slice(&chunk);
                }
                let mut out = openidconnect::http::Response::builder().status(resp.status());
                for (k, v) in resp.headers() {
                    out = out.header(k, v);
                }
                out.body(body)
                    .map_err(|e| HttpError(format!("reading the answer: {e}")))
            };
        // The client's timeout covers the call; this bounds the whole of
        // it, body included, whatever the connection does.
        tokio::time::timeout(PROVIDER_TIMEOUT, call)
            .await
            .map_err(|_| HttpError(format!("no answer within {PROVIDER_TIMEOUT:?}")))?
    }

    /// `GET url` (with `bearer`), its JSON answer; a status other than
    /// 200 is an error.
    async fn get_json(&self, url: &str, bearer: &str) -> Result<Value, HttpError> {
        let request = openidconnect::http::Request::builder()
            .method("GET")
            .uri(url)
            .header("accept", "application/json")
            .header("authorization", format!("Bearer {bearer}"))
            .body(Vec::new())
            .map_err(|e| HttpError(format!("building the request: {e}")))?;
        json_of(&self.send(request).await?, url)
    }

    /// `POST url` with `form`, its JSON answer.
    async fn post_form(&self, url: &str, form: &[(&str, &str)]) -> Result<Value, HttpError> {
        let body = {
            let mut body = form_urlencoded::Serializer::new(String::new());
            for (k, v) in form {
                body.append_pair(k, v);
            }
            body.finish()
        };
        let request = openidconnect::http::Request::builder()
            .method("POST")
            .uri(url)
            .header("accept", "application/json")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.into_bytes())
            .map_err(|e| HttpError(format!("building the request: {e}")))?;
        json_of(&self.send(request).await?, url)
    }
}

impl<'c> AsyncHttpClient<'c> for ProviderHttp {
    type Error = HttpError;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, HttpError>> + Send + 'c>>;

    fn call(&'c self, request: HttpRequest) -> Self::Future {
        Box::pin(self.send(request))
    }
}

/// A URL for logs: no query string (codes and tokens travel there).
fn without_query(url: &reqwest::Url) -> String {
    let mut u = url.clone();
    u.set_query(None);
    u.to_string()
}

/// The JSON of a 200 answer.
fn json_of(resp: &HttpResponse, url: &str) -> Result<Value, HttpError> {
    let url = url.split('?').next().unwrap_or(url);
    if resp.status() != 200 {
        return Err(HttpError(format!("{url}: status {}", resp.status())));
    }
    serde_json::from_slice(resp.body())
        .map_err(|e| HttpError(format!("{url}: the answer is not JSON: {e}")))
}

/// The asymmetric algorithms an ID token may be signed with: never `none`,
/// never an HMAC keyed with the client secret.
const ID_TOKEN_ALGS: [CoreJwsSigningAlgorithm; 10] = [
    CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha256,
    CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha384,
    CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha512,
    CoreJwsSigningAlgorithm::RsaSsaPssSha256,
    CoreJwsSigningAlgorithm::RsaSsaPssSha384,
    CoreJwsSigningAlgorithm::RsaSsaPssSha512,
    CoreJwsSigningAlgorithm::EcdsaP256Sha256,
    CoreJwsSigningAlgorithm::EcdsaP384Sha384,
    CoreJwsSigningAlgorithm::EcdsaP521Sha512,
    CoreJwsSigningAlgorithm::EdDsa,
];

/// One provider: its settings and, for OpenID Connect, its discovery
/// document and keys, fetched when first needed and reused a while.
#[derive(Debug)]
pub(crate) struct Upstream {
    pub(crate) config: ProviderConfig,
    discovered: Mutex<Option<(CoreProviderMetadata, Instant)>>,
}

/// Every configured provider.
#[derive(Debug)]
pub(crate) struct Upstreams {
    http: ProviderHttp,
    providers: Vec<Upstream>,
}

impl Upstreams {
    pub(crate) fn new(configs: &[ProviderConfig]) -> Self {
        Self {
            http: ProviderHttp::new(),
            providers: configs
                .iter()
                .map(|c| Upstream {
                    config: c.clone(),
                    discovered: Mutex::new(None),
                })
                .collect(),
        }
    }

    /// The provider `id`.
    pub(crate) fn get(&self, id: &str) -> Option<&Upstream> {
        self.providers.iter().find(|p| p.config.id == id)
    }

    /// Its discovery document (with its JWKS), fetched again once
    /// [`DISCOVERY_TTL`] passed or when `fresh`.
    async fn metadata(
        &self,
        up: &Upstream,
        issuer: &str,
        fresh: bool,
    ) -> Result<CoreProviderMetadata, UpstreamError> {
        let mut cached = up.discovered.lock().await;
        if let Some((md, at)) = cached.as_ref()
            && !fresh
            && at.elapsed() < DISCOVERY_TTL
        {
            return Ok(md.clone());
        }
        let issuer_url = IssuerUrl::new(issuer.to_string())
            .map_err(|e| UpstreamError::Unavailable(format!("the issuer URL: {e}")))?;
        let md = CoreProviderMetadata::discover_async(issuer_url, &self.http)
            .await
            .map_err(|e| UpstreamError::Unavailable(format!("discovery: {}", chain(&e))))?;
        *cached = Some((md.clone(), Instant::now()));
        Ok(md)
    }

    /// Where to send the browser: the provider's authorization endpoint
    /// with `state`, `nonce`, the PKCE challenge and the scopes.
    pub(crate) async fn authorize_url(
        &self,
        up: &Upstream,
        start: &ProviderStart,
        redirect_uri: &str,
    ) -> Result<String, UpstreamError> {
        let c = &up.config;
        match &c.kind {
            ProviderKind::Oidc { issuer } => {
                let md = self.metadata(up, issuer, false).await?;
                let client = client(up, &md).set_redirect_uri(redirect_url(redirect_uri)?);
                let (state, nonce) = (start.state.clone(), start.nonce.clone());
                let (url, _, _) = client
                    .authorize_url(
                        CoreAuthenticationFlow::AuthorizationCode,
                        move || CsrfToken::new(state),
                        move || Nonce::new(nonce),
                    )
                    .add_scopes(c.scopes.iter().cloned().map(Scope::new))
                    .set_pkce_challenge(PkceCodeChallenge::from_code_verifier_sha256(
                        &PkceCodeVerifier::new(start.pkce_verifier.clone()),
                    ))
                    .url();
                Ok(url.to_string())
            }
            ProviderKind::Github { web_url, .. } => {
                let mut q = form_urlencoded::Serializer::new(String::new());
                q.append_pair("client_id", &c.client_id)
                    .append_pair("redirect_uri", redirect_uri)
                    .append_pair("scope", &c.scopes.join(" "))
                    .append_pair("state", &start.state)
                    .append_pair("code_challenge", &start.pkce_challenge())
                    .append_pair("code_challenge_method", "S256")
                    .append_pair("allow_signup", "false");
                Ok(format!(
                    "{}/login/oauth/authorize?{}",
                    web_url.trim_end_matches('/'),
                    q.finish()
                ))
            }
        }
    }

    /// The provider's answer to `code`, checked: for OpenID Connect the
    /// code exchanged with the PKCE verifier and the ID token's signature,
    /// `iss`, `aud`, `exp` and `nonce` checked (and the redirect's `iss`,
    /// RFC 9207, when sent), with the address and name from userinfo when
    /// the ID token has none; for GitHub the user and their addresses.
    pub(crate) async fn identity(
        &self,
        up: &Upstream,
        code: &str,
        ret: &ProviderReturn,
        redirect_uri: &str,
        iss: Option<&str>,
    ) -> Result<UpstreamIdentity, UpstreamError> {
        match &up.config.kind {
            ProviderKind::Oidc { issuer } => {
                let md = self.metadata(up, issuer, false).await?;
                let (id_token, access) = self
                    .oidc_exchange(up, &md, code, ret, redirect_uri, iss)
                    .await?;
                let (identity, md) = match verify_id_token(up, &md, &id_token, ret) {
                    Ok(identity) => (identity, md),
                    // A key the cached JWKS lacks (the provider rotated):
                    // the keys are fetched again, once, and the token
                    // checked again.
                    Err((true, why)) => {
                        let md = self.metadata(up, issuer, true).await?;
                        let identity =
                            verify_id_token(up, &md, &id_token, ret).map_err(|(_, e)| {
                                UpstreamError::Refused(format!(
                                    "{why}; after fetching the keys again: {e}"
                                ))
                            })?;
                        (identity, md)
                    }
                    Err((false, e)) => return Err(UpstreamError::Refused(e)),
                };
                self.with_userinfo(up, &md, identity, access).await
            }
            ProviderKind::Github { web_url, api_url } => {
                self.github_identity(up, web_url, api_url, code, ret, redirect_uri)
                    .await
            }
        }
    }

    /// Exchanges `code` (with the PKCE verifier): the ID token, unchecked,
    /// and the access token.
    async fn oidc_exchange(
        &self,
        up: &Upstream,
        md: &CoreProviderMetadata,
        code: &str,
        ret: &ProviderReturn,
        redirect_uri: &str,
        iss: Option<&str>,
    ) -> Result<(String, AccessToken), UpstreamError> {
        // RFC 9207 §2.4: an `iss` that is not the provider's is a mix-up.
        if let Some(iss) = iss
            && iss != md.issuer().as_str()
        {
            return Err(UpstreamError::Refused(
                "the redirect's `iss` is not the provider's issuer".into(),
            ));
        }
        let client = client(up, md).set_redirect_uri(redirect_url(redirect_uri)?);
        let request = client
            .exchange_code(AuthorizationCode::new(code.to_string()))
            .map_err(|e| UpstreamError::Unavailable(format!("the token endpoint: {e}")))?;
        let tokens = request
            .set_pkce_verifier(PkceCodeVerifier::new(ret.pkce_verifier.clone()))
            .request_async(&self.http)
            .await
            .map_err(|e| token_error(&e))?;
        let Some(id_token) = tokens.id_token() else {
            return Err(UpstreamError::Unavailable(
                "the token response has no `id_token`".into(),
            ));
        };
        Ok((id_token.to_string(), tokens.access_token().clone()))
    }

    /// OpenID Connect Core §5.4: the claims of the `email` and `profile`
    /// scopes may come from userinfo rather than the ID token. When the
    /// ID token has no address or no name and the provider has a userinfo
    /// endpoint, they are read there (its `sub` must be the ID token's).
    async fn with_userinfo(
        &self,
        up: &Upstream,
        md: &CoreProviderMetadata,
        mut identity: UpstreamIdentity,
        access: AccessToken,
    ) -> Result<UpstreamIdentity, UpstreamError> {
        if identity.email.is_some() && identity.username_hint.is_some() {
            return Ok(identity);
        }
        let client = client(up, md);
        let Ok(request) = client.user_info(
            access,
            Some(SubjectIdentifier::new(identity.subject.clone())),
        ) else {
            return Ok(identity);
        };
        let info: CoreUserInfoClaims = request
            .request_async(&self.http)
            .await
            .map_err(|e| UpstreamError::Unavailable(format!("userinfo: {}", chain(&e))))?;
        if identity.email.is_none()
            && let Some(email) = info.email()
        {
            identity.email = Some(email.as_str().to_string());
            identity.email_verified = info.email_verified() == Some(true);
        }
        if identity.username_hint.is_none() {
            identity.username_hint = info.preferred_username().map(|u| u.as_str().to_string());
        }
        Ok(identity)
    }

    async fn github_identity(
        &self,
        up: &Upstream,
        web_url: &str,
        api_url: &str,
        code: &str,
        ret: &ProviderReturn,
        redirect_uri: &str,
    ) -> Result<UpstreamIdentity, UpstreamError> {
        let c = &up.config;
        let unavailable = |e: HttpError| UpstreamError::Unavailable(e.0);
        let token_url = format!("{}/login/oauth/access_token", web_url.trim_end_matches('/'));
        let answer = self
            .http
            .post_form(
                &token_url,
                &[
                    ("client_id", &c.client_id),
                    ("client_secret", &c.client_secret),
                    ("code", code),
                    ("redirect_uri", redirect_uri),
                    ("code_verifier", &ret.pkce_verifier),
                ],
            )
            .await
            .map_err(unavailable)?;
        let Some(access) = answer["access_token"].as_str() else {
            // GitHub answers a refused code with 200 and `error`.
            return Err(match answer["error"].as_str() {
                Some(e) => {
                    UpstreamError::Refused(format!("the token endpoint refused the code: {e}"))
                }
                None => UpstreamError::Unavailable("the token answer has no `access_token`".into()),
            });
        };
        let api = api_url.trim_end_matches('/');
        let user = self
            .http
            .get_json(&format!("{api}/user"), access)
            .await
            .map_err(unavailable)?;
        let Some(id) = user["id"].as_i64() else {
            return Err(UpstreamError::Unavailable(
                "`/user` has no numeric `id`".into(),
            ));
        };
        let emails = self
            .http
            .get_json(&format!("{api}/user/emails"), access)
            .await
            .map_err(unavailable)?;
        let Some(emails) = emails.as_array() else {
            return Err(UpstreamError::Unavailable(
                "`/user/emails` is not a list".into(),
            ));
        };
        // The primary address, with whether GitHub verified it.
        let primary = emails
            .iter()
            .find(|e| e["primary"].as_bool() == Some(true))
            .and_then(|e| Some((e["email"].as_str()?, e["verified"].as_bool() == Some(true))));
        Ok(UpstreamIdentity {
            provider: c.id.clone(),
            issuer: web_url.trim_end_matches('/').to_string(),
            subject: id.to_string(),
            email: primary.map(|(e, _)| e.to_string()),
            email_verified: primary.is_some_and(|(_, v)| v),
            username_hint: user["login"].as_str().map(str::to_string),
        })
    }
}

/// Checks the ID token `token` (signature by a key of the provider's JWKS
/// with an asymmetric algorithm, `iss`, `aud`, `exp`, `nonce`) and reads
/// the identity from it. A refusal says whether no key of the JWKS
/// matched (worth fetching the keys again).
fn verify_id_token(
    up: &Upstream,
    md: &CoreProviderMetadata,
    token: &str,
    ret: &ProviderReturn,
) -> Result<UpstreamIdentity, (bool, String)> {
    let c = &up.config;
    let client = client(up, md);
    let verifier = client.id_token_verifier().set_allowed_algs(ID_TOKEN_ALGS);
    let id_token: openidconnect::core::CoreIdToken = token
        .parse()
        .map_err(|e| (false, format!("the ID token is malformed: {e}")))?;
    let claims = id_token
        .claims(&verifier, &Nonce::new(ret.nonce.clone()))
        .map_err(|e| {
            let no_key = matches!(
                e,
                ClaimsVerificationError::SignatureVerification(
                    SignatureVerificationError::NoMatchingKey
                )
            );
            (no_key, format!("the ID token was refused: {}", chain(&e)))
        })?;
    Ok(UpstreamIdentity {
        provider: c.id.clone(),
        issuer: claims.issuer().as_str().to_string(),
        subject: claims.subject().as_str().to_string(),
        email: claims.email().map(|e| e.as_str().to_string()),
        email_verified: claims.email_verified() == Some(true),
        username_hint: claims.preferred_username().map(|u| u.as_str().to_string()),
    })
}

/// The provider's client, with this server's credentials.
fn client(
    up: &Upstream,
    md: &CoreProviderMetadata,
) -> openidconnect::core::CoreClient<
    openidconnect::EndpointSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointMaybeSet,
    openidconnect::EndpointMaybeSet,
> {
    CoreClient::from_provider_metadata(
        md.clone(),
        ClientId::new(up.config.client_id.clone()),
        Some(ClientSecret::new(up.config.client_secret.clone())),
    )
}

fn redirect_url(uri: &str) -> Result<RedirectUrl, UpstreamError> {
    RedirectUrl::new(uri.to_string())
        .map_err(|e| UpstreamError::Unavailable(format!("the callback URL: {e}")))
}

/// A failed code exchange: refused by the provider, or not answered.
fn token_error<RE, T>(e: &openidconnect::RequestTokenError<RE, T>) -> UpstreamError
where
    RE: std::error::Error + 'static,
    T: openidconnect::ErrorResponse + 'static,
{
    match e {
        openidconnect::RequestTokenError::ServerResponse(r) => {
            UpstreamError::Refused(format!("the token endpoint refused the code: {r}"))
        }
        other => UpstreamError::Unavailable(format!("the token endpoint: {}", chain(other))),
    }
}

/// An error with its sources, for the log.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
