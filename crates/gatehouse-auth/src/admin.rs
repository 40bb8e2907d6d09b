//! Client and user administration (the `client ...` / `user ...` commands)
//! and the idempotent `[[bootstrap.*]]` registrations.

use std::fmt;
use std::sync::Arc;

use crate::accounts::{AccountProfile, Accounts};
use crate::claims::{Claims, check_claims};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::keys::SigningAlg;
use crate::model::{
    ClientRecord, ClientType, Grant, IdentityKind, MAX_NEW_NAME, NAME_CHARACTERS, NameTaken,
    NewIdentity, UserRecord, valid_new_name, valid_scope_token,
};
use crate::random::Random;
use crate::redirect::check_redirect_uri;
use crate::repo::AuthRepo;
use crate::secrets;
use crate::server::CacheHooks;

/// Longest client id, user name, scope or audience accepted.
const MAX_NAME: usize = 256;
/// Longest password accepted (argon2 takes any length; this bounds the work).
pub const MAX_PASSWORD: usize = 1024;

/// A client to register.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewClient {
    /// The client id (the NAME of `client add`).
    pub client_id: String,
    /// Grant types: `authorization_code`, `password`, `client_credentials`,
    /// `refresh_token`, and the token exchange URN (also accepted as
    /// `token-exchange`).
    pub grants: Vec<String>,
    /// Scopes the client may obtain.
    pub scopes: Vec<String>,
    /// Targets the client may ask for in a token exchange.
    pub audiences: Vec<String>,
    /// Redirect URIs of the authorization code flow
    /// ([`crate::check_redirect_uri`]).
    pub redirect_uris: Vec<String>,
    /// A public client: no secret, `client_id` in the body, PKCE.
    pub public: bool,
    /// A first-party client: no consent page.
    pub first_party: bool,
    /// `id_token_signed_response_alg`: how the client's ID tokens are
    /// signed. `None`: RS256 ([`crate::DEFAULT_ID_TOKEN_ALG`]).
    pub id_token_signed_response_alg: Option<SigningAlg>,
}

/// A client as listed: everything but the secret hash.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ClientInfo {
    /// The client id.
    pub client_id: String,
    /// Grant types.
    pub grants: Vec<String>,
    /// Scopes.
    pub scopes: Vec<String>,
    /// Exchange targets.
    pub audiences: Vec<String>,
    /// Redirect URIs.
    pub redirect_uris: Vec<String>,
    /// Whether the client is public (has no secret).
    pub public: bool,
    /// Whether the client skips the consent page.
    pub first_party: bool,
    /// The algorithm of its ID tokens ([`ClientRecord::id_token_alg`]).
    pub id_token_signed_response_alg: &'static str,
    /// Creation time, seconds since the epoch.
    pub created_at: i64,
}

/// A user as listed: everything but the password hash.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UserInfo {
    /// The user name.
    pub username: String,
    /// The `sub` of the user's tokens: the account row's id with an
    /// account type, the user name without.
    pub sub: String,
    /// Scopes the user may grant.
    pub scopes: Vec<String>,
    /// Custom claims carried by the user's access tokens.
    pub claims: Claims,
    /// Creation time, seconds since the epoch.
    pub created_at: i64,
}

/// A client secret, shown once. `Debug` does not print it.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientSecret(pub String);

impl fmt::Debug for ClientSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClientSecret(<redacted>)")
    }
}

/// What a bootstrap registration did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootstrapOutcome {
    /// It did not exist and was created.
    Created,
    /// It existed and differed; it was updated in place.
    Updated,
    /// It existed exactly as configured.
    Unchanged,
}

/// Administration of clients and users.
#[derive(Debug, Clone)]
pub struct Admin {
    repo: Arc<dyn AuthRepo>,
    clock: Arc<dyn Clock>,
    random: Arc<dyn Random>,
    /// The caches of the server this came from, told about changes.
    hooks: Option<CacheHooks>,
    /// The account rows, when the schema has an account type.
    accounts: Option<Arc<dyn Accounts>>,
    /// What an account row made without a credential (by a bypass caller)
    /// may grant once it gets a password: `[auth] sign_up_scopes`.
    account_scopes: Vec<String>,
}

pub(crate) fn check_name(what: &str, v: &str) -> Result<()> {
    let ok = !v.is_empty() && v.len() <= MAX_NAME && v.bytes().all(|b| (0x21..=0x7E).contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidInput(
            format!("{what} must be 1 to {MAX_NAME} visible ASCII characters").into(),
        ))
    }
}

/// What the name of `kind` is called in messages.
fn name_of(kind: IdentityKind) -> &'static str {
    match kind {
        IdentityKind::User => "a user name",
        IdentityKind::Client => "a client id",
        IdentityKind::Consumer => "a consumer key",
    }
}

/// The rule for a name registered anew ([`valid_new_name`]), checked by
/// [`register`]; also asked before any costly work (hashing a password)
/// so that a refused name costs nothing.
pub(crate) fn check_new_name(kind: IdentityKind, name: &str) -> Result<()> {
    if valid_new_name(name) {
        Ok(())
    } else {
        Err(Error::InvalidInput(
            format!(
                "{} must be 1 to {MAX_NEW_NAME} characters among {NAME_CHARACTERS}",
                name_of(kind)
            )
            .into(),
        ))
    }
}

/// Registers a new user, client or consumer through
/// [`AuthRepo::register`], the one place that keeps their names apart: a
/// name must follow [`check_new_name`], and one held by any of the three,
/// or retired by the removal of one, without regard to ASCII case, is a
/// `Conflict` naming the holder. `Ok(None)`: registered. For bootstrap
/// (`same_kind_ok`), the very name taken meanwhile by the same kind
/// (another instance applying the same configuration) is
/// `Ok(Some(kind))` instead.
pub(crate) async fn register(
    repo: &dyn AuthRepo,
    identity: NewIdentity<'_>,
    same_kind_ok: bool,
) -> Result<Option<IdentityKind>> {
    let (name, kind) = (identity.name(), identity.kind());
    check_new_name(kind, name)?;
    if name.eq_ignore_ascii_case(crate::GRAPHIQL_CLIENT_ID) {
        return Err(Error::Conflict(
            format!(
                "the name {name:?} is reserved for the server's built-in GraphiQL client \
                 (names are compared without regard to case)"
            )
            .into(),
        ));
    }
    let message = match repo.register(identity).await? {
        None => return Ok(None),
        Some(NameTaken::Live(holder, held)) if holder == kind && held == name => {
            if same_kind_ok {
                return Ok(Some(holder));
            }
            format!("a {kind} named {name:?} already exists")
        }
        Some(NameTaken::Live(holder, held)) if holder == kind => format!(
            "a {kind} named {held:?} already exists, and names are unique without regard \
             to case: choose another name"
        ),
        Some(NameTaken::Live(holder, held)) => format!(
            "the name {name:?} is already taken by a {holder} ({held:?}): users, clients and \
             OAuth 1.0 consumers share one namespace of names, compared without regard to \
             case (each can be the subject of a token), so choose another name for the {kind}"
        ),
        Some(NameTaken::Retired(holder, held)) => format!(
            "the name {name:?} belonged to a {holder} ({held:?}) that was removed: a removed \
             identity's name is never given to another, because tokens, logs and rows \
             (owner fields hold the `sub`) still name it; choose another name for the {kind}"
        ),
    };
    Err(Error::Conflict(message.into()))
}

fn normalize_grants(grants: &[String]) -> Result<Vec<Grant>> {
    let mut out: Vec<Grant> = Vec::new();
    for g in grants {
        let g = match g.trim() {
            "token-exchange" | "token_exchange" => Some(Grant::TokenExchange),
            other => Grant::parse(other),
        };
        let Some(g) = g else {
            return Err(Error::InvalidInput(
                format!(
                    "unknown grant type {g:?}; known: authorization_code, password, \
                     client_credentials, refresh_token, token-exchange"
                )
                .into(),
            ));
        };
        if !out.contains(&g) {
            out.push(g);
        }
    }
    Ok(out)
}

fn normalize_redirect_uris(uris: &[String]) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for u in uris {
        check_redirect_uri(u)?;
        if !out.contains(u) {
            out.push(u.clone());
        }
    }
    Ok(out)
}

pub(crate) fn normalize_scopes(scopes: &[String]) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for s in scopes
        .iter()
        .flat_map(|s| s.split(' '))
        .filter(|s| !s.is_empty())
    {
        if !valid_scope_token(s) {
            return Err(Error::InvalidInput(format!("invalid scope {s:?}").into()));
        }
        if !out.iter().any(|x| x == s) {
            out.push(s.to_string());
        }
    }
    out.sort();
    Ok(out)
}

fn normalize_audiences(auds: &[String]) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for a in auds.iter().map(|a| a.trim()).filter(|a| !a.is_empty()) {
        check_name("an audience", a)?;
        if !out.iter().any(|x| x == a) {
            out.push(a.to_string());
        }
    }
    Ok(out)
}

fn check_password(password: &str) -> Result<()> {
    if password.is_empty() || password.len() > MAX_PASSWORD {
        return Err(Error::InvalidInput(
            format!("a password must be 1 to {MAX_PASSWORD} bytes").into(),
        ));
    }
    Ok(())
}

impl Admin {
    /// Administration over `repo`, with time and randomness passed in.
    pub fn new(repo: Arc<dyn AuthRepo>, clock: Arc<dyn Clock>, random: Arc<dyn Random>) -> Self {
        Self {
            repo,
            clock,
            random,
            hooks: None,
            accounts: None,
            account_scopes: Vec::new(),
        }
    }

    /// Users become the rows of the account type: created, changed and
    /// removed through `accounts`, with their credential. An account row
    /// made without one (by a bypass caller) gets `scopes` with its first
    /// password.
    pub fn with_accounts(mut self, accounts: Option<Arc<dyn Accounts>>, scopes: &[String]) -> Self {
        self.accounts = accounts;
        self.account_scopes = scopes.to_vec();
        self
    }

    /// Whether users are the rows of an account type.
    pub fn uses_accounts(&self) -> bool {
        self.accounts.is_some()
    }

    /// The account signing in as `username`, and its credential.
    async fn account(
        &self,
        accounts: &dyn Accounts,
        username: &str,
    ) -> Result<(AccountProfile, UserRecord)> {
        let missing = || Error::NotFound(format!("no user {username:?}").into());
        let profile = accounts
            .find_by_username(username)
            .await?
            .ok_or_else(missing)?;
        let credential = self
            .repo
            .find_user(&profile.sub)
            .await?
            .ok_or_else(missing)?;
        Ok((profile, credential))
    }

    pub(crate) fn with_cache_hooks(mut self, hooks: CacheHooks) -> Self {
        self.hooks = Some(hooks);
        self
    }

    fn client_changed(&self, client_id: &str) {
        if let Some(h) = &self.hooks {
            h.client_changed(client_id);
        }
    }

    fn revoked(&self) {
        if let Some(h) = &self.hooks {
            h.revoked();
        }
    }

    /// The argon2 hash of a new password (off the runtime's threads).
    pub(crate) async fn hash_new_password(&self, password: &str) -> Result<String> {
        self.hash_password(password).await
    }

    async fn hash_password(&self, password: &str) -> Result<String> {
        let pw = password.to_string();
        let random = self.random.clone();
        tokio::task::spawn_blocking(move || secrets::hash_password(&pw, random.as_ref()))
            .await
            .map_err(|e| Error::server(format!("password hashing task: {e}")))?
    }

    /// The record of `c`; `secret` is `None` for a public client.
    fn client_record(
        &self,
        c: &NewClient,
        secret: Option<&str>,
        created_at: i64,
    ) -> Result<ClientRecord> {
        check_name("a client id", &c.client_id)?;
        let grants = normalize_grants(&c.grants)?;
        let redirect_uris = normalize_redirect_uris(&c.redirect_uris)?;
        if grants.contains(&Grant::AuthorizationCode) && redirect_uris.is_empty() {
            return Err(Error::InvalidInput(
                "the authorization_code grant needs at least one redirect URI".into(),
            ));
        }
        if c.public {
            // A public client cannot keep a secret (RFC 6749 §2.1): the
            // grants that rest on one are not for it.
            if let Some(g) = grants.iter().find(|g| {
                matches!(
                    g,
                    Grant::ClientCredentials | Grant::TokenExchange | Grant::Password
                )
            }) {
                return Err(Error::InvalidInput(
                    format!("a public client cannot use the {g} grant: it has no secret").into(),
                ));
            }
        }
        Ok(ClientRecord {
            client_id: c.client_id.clone(),
            secret_hash: secret.map(secrets::hash_secret).unwrap_or_default(),
            client_type: if c.public {
                ClientType::Public
            } else {
                ClientType::Confidential
            },
            first_party: c.first_party,
            redirect_uris,
            grants,
            scopes: normalize_scopes(&c.scopes)?,
            audiences: normalize_audiences(&c.audiences)?,
            id_token_signed_response_alg: c.id_token_signed_response_alg,
            created_at,
            updated_at: self.clock.now(),
        })
    }

    /// `client add`: registers a client with a new random 256-bit secret,
    /// returned once (only its SHA-256 is stored); a public client gets
    /// none (`None`). `Conflict` if a user, client or consumer holds the name.
    pub async fn add_client(&self, c: &NewClient) -> Result<(ClientInfo, Option<ClientSecret>)> {
        let secret = (!c.public).then(|| secrets::generate_client_secret(self.random.as_ref()));
        let record = self.client_record(c, secret.as_deref(), self.clock.now())?;
        register(self.repo.as_ref(), NewIdentity::Client(&record), false).await?;
        self.client_changed(&c.client_id);
        Ok((info(&record), secret.map(ClientSecret)))
    }

    /// `client list`, ordered by id.
    pub async fn list_clients(&self) -> Result<Vec<ClientInfo>> {
        Ok(self.repo.list_clients().await?.iter().map(info).collect())
    }

    /// `client remove`: the client and every token issued to it stop
    /// working; its id stays reserved, like a removed user's name.
    /// `NotFound` if there is no such client.
    pub async fn remove_client(&self, client_id: &str) -> Result<()> {
        if self.repo.delete_client(client_id).await? {
            self.client_changed(client_id);
            self.repo.revoke_client_tokens(client_id).await?;
            self.revoked();
            Ok(())
        } else {
            Err(Error::NotFound(format!("no client {client_id:?}").into()))
        }
    }

    /// `client rotate-secret`: replaces the secret; the old one stops working
    /// at once on the server this came from ([`crate::AuthServer::admin`]), and
    /// within `client_cache_ttl` on other processes and instances. Returns the new secret, shown once.
    pub async fn rotate_client_secret(&self, client_id: &str) -> Result<ClientSecret> {
        let Some(mut record) = self.repo.get_client(client_id).await? else {
            return Err(Error::NotFound(format!("no client {client_id:?}").into()));
        };
        if record.is_public() {
            return Err(Error::InvalidInput(
                format!("{client_id:?} is a public client: it has no secret").into(),
            ));
        }
        let secret = secrets::generate_client_secret(self.random.as_ref());
        record.secret_hash = secrets::hash_secret(&secret);
        record.updated_at = self.clock.now();
        self.repo.upsert_client(&record).await?;
        self.client_changed(client_id);
        Ok(ClientSecret(secret))
    }

    /// `[[bootstrap.clients]]` of a confidential client: creates it, or
    /// updates it in place (keeping its creation time) when its secret or
    /// settings differ.
    pub async fn bootstrap_client(&self, c: &NewClient, secret: &str) -> Result<BootstrapOutcome> {
        self.bootstrap_any_client(c, Some(secret)).await
    }

    /// `[[bootstrap.clients]]` of a public client (`public = true`, no
    /// secret), as [`Admin::bootstrap_client`].
    pub async fn bootstrap_public_client(&self, c: &NewClient) -> Result<BootstrapOutcome> {
        self.bootstrap_any_client(c, None).await
    }

    /// A public client has no secret (`None`); any other needs one.
    async fn bootstrap_any_client(
        &self,
        c: &NewClient,
        secret: Option<&str>,
    ) -> Result<BootstrapOutcome> {
        match (c.public, secret) {
            (true, Some(_)) => {
                return Err(Error::InvalidInput(
                    "a public client has no client secret".into(),
                ));
            }
            (false, None) | (false, Some("")) => {
                return Err(Error::InvalidInput(
                    "a client secret must not be empty".into(),
                ));
            }
            _ => {}
        }
        let existing = self.repo.get_client(&c.client_id).await?;
        let created_at = existing.as_ref().map_or(self.clock.now(), |e| e.created_at);
        let mut record = self.client_record(c, secret, created_at)?;
        match existing {
            None => {
                let raced =
                    register(self.repo.as_ref(), NewIdentity::Client(&record), true).await?;
                self.client_changed(&c.client_id);
                Ok(raced.map_or(BootstrapOutcome::Created, |_| BootstrapOutcome::Unchanged))
            }
            Some(e) => {
                let same_secret = match secret {
                    Some(secret) => secrets::verify_secret(secret, &e.secret_hash),
                    None => e.secret_hash.is_empty(),
                };
                let same = same_secret
                    && e.client_type == record.client_type
                    && e.first_party == record.first_party
                    && e.redirect_uris == record.redirect_uris
                    && e.grants == record.grants
                    && e.scopes == record.scopes
                    && e.audiences == record.audiences
                    && e.id_token_signed_response_alg == record.id_token_signed_response_alg;
                if same {
                    Ok(BootstrapOutcome::Unchanged)
                } else {
                    record.created_at = e.created_at;
                    self.repo.upsert_client(&record).await?;
                    self.client_changed(&c.client_id);
                    Ok(BootstrapOutcome::Updated)
                }
            }
        }
    }

    /// `user add`: registers a resource owner with an argon2id password hash
    /// and no custom claims. `Conflict` if the name exists.
    pub async fn add_user(
        &self,
        username: &str,
        password: &str,
        scopes: &[String],
    ) -> Result<UserInfo> {
        self.add_user_with_claims(username, password, scopes, &Claims::new())
            .await
    }

    /// `user add --claim NAME=VALUE`: registers a resource owner with custom
    /// claims (checked by [`check_claims`]). `Conflict` if a user, client or
    /// consumer holds the name.
    pub async fn add_user_with_claims(
        &self,
        username: &str,
        password: &str,
        scopes: &[String],
        claims: &Claims,
    ) -> Result<UserInfo> {
        self.add_account(username, None, None, password, scopes, claims)
            .await
    }

    /// Registers a user as [`Admin::add_user_with_claims`] does, with the
    /// account row's `id` when given (else a generated one) and its
    /// `email` set when `email` is given (accounts of a type with that
    /// field only). An address another account has is `Conflict`, as a
    /// taken name is.
    pub(crate) async fn add_account(
        &self,
        username: &str,
        id: Option<&str>,
        email: Option<&str>,
        password: &str,
        scopes: &[String],
        claims: &Claims,
    ) -> Result<UserInfo> {
        check_new_name(IdentityKind::User, username)?;
        check_password(password)?;
        let scopes = normalize_scopes(scopes)?;
        check_claims(claims)?;
        let now = self.clock.now();
        let record = UserRecord {
            username: username.to_string(),
            password_hash: self.hash_password(password).await?,
            scopes,
            claims: claims.clone(),
            created_at: now,
            updated_at: now,
        };
        if let Some(accounts) = &self.accounts {
            let credential = UserRecord {
                claims: Claims::new(),
                ..record
            };
            let Some(profile) = accounts
                .create(username, id, email, claims, &credential)
                .await?
            else {
                return Err(Error::Conflict(
                    format!("a user named {username:?} already exists").into(),
                ));
            };
            return Ok(account_info(&profile, &credential));
        }
        register(self.repo.as_ref(), NewIdentity::User(&record), false).await?;
        Ok(user_info(&record))
    }

    /// `user set-claims`: replaces the user's custom claims (an empty set
    /// clears them). Access tokens already issued keep the claims they
    /// were signed with until they expire; the next password login,
    /// refresh or exchange of a refresh token carries the new ones.
    /// `NotFound` if there is no such user.
    pub async fn set_user_claims(&self, username: &str, claims: &Claims) -> Result<UserInfo> {
        check_claims(claims)?;
        if let Some(accounts) = &self.accounts {
            let (profile, credential) = self.account(accounts.as_ref(), username).await?;
            let profile = accounts.set_claims(&profile.sub, claims).await?;
            return Ok(account_info(&profile, &credential));
        }
        let Some(mut record) = self.repo.find_user(username).await? else {
            return Err(Error::NotFound(format!("no user {username:?}").into()));
        };
        record.claims = claims.clone();
        record.updated_at = self.clock.now();
        self.repo.upsert_user(&record).await?;
        Ok(user_info(&record))
    }

    /// `user show`: one user, without the password hash. `NotFound` if
    /// there is no such user.
    pub async fn get_user(&self, username: &str) -> Result<UserInfo> {
        if let Some(accounts) = &self.accounts {
            let (profile, credential) = self.account(accounts.as_ref(), username).await?;
            return Ok(account_info(&profile, &credential));
        }
        match self.repo.find_user(username).await? {
            Some(record) => Ok(user_info(&record)),
            None => Err(Error::NotFound(format!("no user {username:?}").into())),
        }
    }

    /// `user passwd`: sets a new password. Without an account type, tokens
    /// already issued stay valid until they expire or are revoked; with
    /// one, every token of the account is revoked (its password changed).
    pub async fn set_password(&self, username: &str, password: &str) -> Result<()> {
        check_password(password)?;
        if let Some(accounts) = &self.accounts {
            let missing = || Error::NotFound(format!("no user {username:?}").into());
            let profile = accounts
                .find_by_username(username)
                .await?
                .ok_or_else(missing)?;
            let now = self.clock.now();
            // A row a bypass caller made has no credential yet: its first
            // password gives it one.
            let mut credential =
                self.repo
                    .find_user(&profile.sub)
                    .await?
                    .unwrap_or_else(|| UserRecord {
                        username: profile.sub.clone(),
                        password_hash: String::new(),
                        scopes: self.account_scopes.clone(),
                        claims: Claims::new(),
                        created_at: now,
                        updated_at: now,
                    });
            credential.password_hash = self.hash_password(password).await?;
            credential.updated_at = now;
            self.repo.upsert_user(&credential).await?;
            self.repo.revoke_user_tokens(&profile.sub).await?;
            self.revoked();
            return Ok(());
        }
        let Some(mut record) = self.repo.find_user(username).await? else {
            return Err(Error::NotFound(format!("no user {username:?}").into()));
        };
        record.password_hash = self.hash_password(password).await?;
        record.updated_at = self.clock.now();
        self.repo.upsert_user(&record).await?;
        Ok(())
    }

    /// `user remove`: the user and every token issued for them stop working.
    /// The name stays reserved ([`AuthRepo::delete_user`]): no later
    /// registration (sign-up, `user add`, a client, a consumer) gets it, so
    /// the rows and logs that name it never point at a stranger.
    pub async fn remove_user(&self, username: &str) -> Result<()> {
        if let Some(accounts) = &self.accounts {
            let missing = || Error::NotFound(format!("no user {username:?}").into());
            let profile = accounts
                .find_by_username(username)
                .await?
                .ok_or_else(missing)?;
            // The row's deletion revokes its tokens in its transaction
            // (the account's commit hook); said here for this server's cache.
            if !accounts.delete(&profile.sub).await? {
                return Err(missing());
            }
            self.repo.revoke_user_tokens(&profile.sub).await?;
            self.revoked();
            return Ok(());
        }
        if self.repo.delete_user(username).await? {
            self.repo.revoke_user_tokens(username).await?;
            self.revoked();
            Ok(())
        } else {
            Err(Error::NotFound(format!("no user {username:?}").into()))
        }
    }

    /// `user list`, ordered by name.
    pub async fn list_users(&self) -> Result<Vec<UserInfo>> {
        if let Some(accounts) = &self.accounts {
            let mut out = Vec::new();
            for profile in accounts.list().await? {
                // An account row without a credential (made by a bypass
                // caller, no password yet) is listed without scopes.
                let credential = self.repo.find_user(&profile.sub).await?;
                out.push(match credential {
                    Some(c) => account_info(&profile, &c),
                    None => UserInfo {
                        username: profile.username.clone(),
                        sub: profile.sub.clone(),
                        scopes: Vec::new(),
                        claims: profile.claims.clone(),
                        created_at: 0,
                    },
                });
            }
            return Ok(out);
        }
        Ok(self
            .repo
            .list_users()
            .await?
            .iter()
            .map(user_info)
            .collect())
    }

    /// `[[bootstrap.users]]` without claims: creates the user, or updates it
    /// when the password or scopes differ, or when it has custom claims
    /// (they are cleared). An unchanged password is not re-hashed.
    pub async fn bootstrap_user(
        &self,
        username: &str,
        password: &str,
        scopes: &[String],
    ) -> Result<BootstrapOutcome> {
        self.bootstrap_user_with_claims(username, password, scopes, &Claims::new())
            .await
    }

    /// `[[bootstrap.users]]`: creates the user, or updates it when the
    /// password, scopes or custom claims differ (the configured claims
    /// replace the stored ones). An unchanged password is not re-hashed.
    pub async fn bootstrap_user_with_claims(
        &self,
        username: &str,
        password: &str,
        scopes: &[String],
        claims: &Claims,
    ) -> Result<BootstrapOutcome> {
        check_name("a user name", username)?;
        check_password(password)?;
        let scopes = normalize_scopes(scopes)?;
        check_claims(claims)?;
        let now = self.clock.now();
        if let Some(accounts) = &self.accounts {
            return self
                .bootstrap_account(accounts.as_ref(), username, password, scopes, claims)
                .await;
        }
        let Some(mut existing) = self.repo.find_user(username).await? else {
            let record = UserRecord {
                username: username.to_string(),
                password_hash: self.hash_password(password).await?,
                scopes,
                claims: claims.clone(),
                created_at: now,
                updated_at: now,
            };
            let raced = register(self.repo.as_ref(), NewIdentity::User(&record), true).await?;
            return Ok(raced.map_or(BootstrapOutcome::Created, |_| BootstrapOutcome::Unchanged));
        };
        let pw = password.to_string();
        let hash = existing.password_hash.clone();
        let same_password =
            tokio::task::spawn_blocking(move || secrets::verify_password(&pw, &hash))
                .await
                .map_err(|e| Error::server(format!("password check task: {e}")))?;
        if same_password && existing.scopes == scopes && existing.claims == *claims {
            return Ok(BootstrapOutcome::Unchanged);
        }
        if !same_password {
            existing.password_hash = self.hash_password(password).await?;
        }
        existing.scopes = scopes;
        existing.claims = claims.clone();
        existing.updated_at = now;
        self.repo.upsert_user(&existing).await?;
        Ok(BootstrapOutcome::Updated)
    }

    /// [`Admin::bootstrap_user_with_claims`] with an account type: the
    /// row's claims and the credential brought to the configuration.
    async fn bootstrap_account(
        &self,
        accounts: &dyn Accounts,
        username: &str,
        password: &str,
        scopes: Vec<String>,
        claims: &Claims,
    ) -> Result<BootstrapOutcome> {
        let Some(profile) = accounts.find_by_username(username).await? else {
            // A declared user's row is named as the user: its `sub` does
            // not depend on whether the database predates the account
            // type (users from before it are adopted under their names),
            // and `[[bootstrap.rows]]` may name it.
            return match self
                .add_account(username, Some(username), None, password, &scopes, claims)
                .await
            {
                Ok(_) => Ok(BootstrapOutcome::Created),
                // Another instance created it meanwhile.
                Err(Error::Conflict(_)) => Ok(BootstrapOutcome::Unchanged),
                Err(e) => Err(e),
            };
        };
        let mut changed = false;
        if profile.claims != *claims {
            accounts.set_claims(&profile.sub, claims).await?;
            changed = true;
        }
        let existing = self.repo.find_user(&profile.sub).await?;
        let same_password = match &existing {
            Some(c) => {
                let (pw, hash) = (password.to_string(), c.password_hash.clone());
                tokio::task::spawn_blocking(move || secrets::verify_password(&pw, &hash))
                    .await
                    .map_err(|e| Error::server(format!("password check task: {e}")))?
            }
            None => false,
        };
        if !same_password || existing.as_ref().is_some_and(|c| c.scopes != scopes) {
            let now = self.clock.now();
            let credential = UserRecord {
                username: profile.sub.clone(),
                password_hash: match (&existing, same_password) {
                    (Some(c), true) => c.password_hash.clone(),
                    _ => self.hash_password(password).await?,
                },
                scopes,
                claims: Claims::new(),
                created_at: existing.as_ref().map_or(now, |c| c.created_at),
                updated_at: now,
            };
            self.repo.upsert_user(&credential).await?;
            changed = true;
        }
        Ok(if changed {
            BootstrapOutcome::Updated
        } else {
            BootstrapOutcome::Unchanged
        })
    }
}

fn info(c: &ClientRecord) -> ClientInfo {
    ClientInfo {
        client_id: c.client_id.clone(),
        grants: c.grants.iter().map(|g| g.as_str().to_string()).collect(),
        scopes: c.scopes.clone(),
        audiences: c.audiences.clone(),
        redirect_uris: c.redirect_uris.clone(),
        public: c.is_public(),
        first_party: c.first_party,
        id_token_signed_response_alg: c.id_token_alg().as_str(),
        created_at: c.created_at,
    }
}

fn account_info(profile: &AccountProfile, credential: &UserRecord) -> UserInfo {
    UserInfo {
        username: profile.username.clone(),
        sub: profile.sub.clone(),
        scopes: credential.scopes.clone(),
        claims: profile.claims.clone(),
        created_at: credential.created_at,
    }
}

fn user_info(u: &UserRecord) -> UserInfo {
    UserInfo {
        username: u.username.clone(),
        sub: u.username.clone(),
        scopes: u.scopes.clone(),
        claims: u.claims.clone(),
        created_at: u.created_at,
    }
}
