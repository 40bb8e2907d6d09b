//! Signing in through other identity providers: the rows
//! of a flow under way, and which account an upstream identity signs in,
//! links to or creates. No HTTP here: `gatehouse-oauth` talks to the
//! providers and renders the pages. Decisions: `docs/design/federation.md`.
//!
//! - **No session.** A redirect to a provider writes a row keyed by the
//!   SHA-256 of its `state` (256 random bits); the PKCE verifier and the
//!   `nonce` are MACs of the `state` under the forms key, so nothing
//!   secret is stored and any instance finishes the flow. The row is
//!   bound to the MAC of a cookie set on the browser that started it,
//!   lives [`PROVIDER_FLOW_TTL`] seconds and is spent on first use.
//! - **An identity is (issuer, subject).** A known pair signs its account
//!   in; an address only ever proposes a link ([`AuthServer::federated_sign_in`]).

use subtle::ConstantTimeEq;

use super::*;
use crate::accounts::AccountProfile;
use crate::federation::{
    FederationStore, FlowKind, IdentityRecord, LinkMode, PROVIDER_FLOW_TTL, ProviderFlow,
    ProviderPolicy, UpstreamIdentity,
};
use crate::flows::{FlowMail, Verification};

/// Attempts at a free user name for an account a provider creates.
const NAME_ATTEMPTS: usize = 5;
/// Longest user name taken from a provider's hint.
const MAX_HINTED_NAME: usize = 64;

/// The identities' storage and the providers' linking settings
/// ([`AuthServer::use_federation`]).
#[derive(Debug)]
pub(crate) struct Federation {
    store: Arc<dyn FederationStore>,
    providers: Vec<ProviderPolicy>,
}

/// What a redirect to a provider carries: `state`, and what is derived
/// from it.
#[derive(Clone)]
pub struct ProviderStart {
    /// `state`: 256 random bits.
    pub state: String,
    /// `nonce` (a MAC of `state`).
    pub nonce: String,
    /// The PKCE `code_verifier` (a MAC of `state`); its S256 challenge
    /// goes to the provider.
    pub pkce_verifier: String,
    /// The value of the cookie that binds the flow to the browser.
    pub cookie: String,
}

impl fmt::Debug for ProviderStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProviderStart(<redacted>)")
    }
}

impl ProviderStart {
    /// The S256 `code_challenge` of the verifier (RFC 7636 §4.2).
    pub fn pkce_challenge(&self) -> String {
        crate::b64(&sha2::Sha256::digest(self.pkce_verifier.as_bytes()))
    }
}

/// A provider's redirect back, matched with the flow it finishes.
#[derive(Clone)]
pub struct ProviderReturn {
    /// The authorization request to continue.
    pub return_to: ReturnTo,
    /// The `nonce` the ID token must carry.
    pub nonce: String,
    /// The PKCE `code_verifier` for the code exchange.
    pub pkce_verifier: String,
}

impl fmt::Debug for ProviderReturn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProviderReturn(<redacted>)")
    }
}

/// Where an upstream sign-in leads.
#[derive(Debug, Clone)]
pub enum Federated {
    /// An account signs in: on to consent or the code.
    SignedIn(SignedIn),
    /// The identity's address matches the account `username`, which
    /// links it once its password is given on a page; `handle` (and the
    /// new value of the flow cookie, `cookie`) names the waiting row.
    Confirm {
        /// The page's hidden handle.
        handle: String,
        /// The flow cookie's new value.
        cookie: String,
        /// The account's user name.
        username: String,
    },
}

/// A refusal shown on the page (never a server fault): the sign-in is
/// not allowed, whoever tries again.
fn refused(msg: impl Into<crate::error::Description>) -> Error {
    Error::InvalidInput(msg.into())
}

impl AuthServer {
    /// Turns on signing in through `providers`, with `store` keeping the
    /// identities and the flows' rows (called once, at start, when
    /// `[[auth.providers]]` is set and there is an account type; a second
    /// call is ignored).
    pub fn use_federation(&self, store: Arc<dyn FederationStore>, providers: Vec<ProviderPolicy>) {
        let _ = self
            .federation
            .set(Arc::new(Federation { store, providers }));
    }

    /// The providers signed in through, in their configured order.
    pub fn providers(&self) -> &[ProviderPolicy] {
        self.federation
            .get()
            .map(|f| f.providers.as_slice())
            .unwrap_or(&[])
    }

    fn federation(&self) -> Result<Arc<Federation>> {
        self.federation
            .get()
            .cloned()
            .ok_or_else(|| Error::NotFound("no identity provider is set up".into()))
    }

    fn policy<'f>(&self, fed: &'f Federation, id: &str) -> Result<&'f ProviderPolicy> {
        fed.providers
            .iter()
            .find(|p| p.id == id)
            .ok_or_else(|| Error::NotFound("no such identity provider".into()))
    }

    /// The MAC that stands for a flow cookie in its row.
    fn browser_mac(&self, cookie: &str) -> String {
        crate::b64(&self.cipher.form_mac("idp-browser", cookie.as_bytes()))
    }

    /// A redirect to the provider `provider` for the authorization request
    /// `return_to` (already validated): writes the flow's row and answers
    /// what the redirect and its cookie carry.
    pub async fn provider_start(
        &self,
        provider: &str,
        return_to: ReturnTo,
    ) -> Result<ProviderStart> {
        let fed = self.federation()?;
        self.policy(&fed, provider)?;
        let state = token_string(self.random.as_ref(), 32);
        let cookie = token_string(self.random.as_ref(), 32);
        let now = self.now();
        fed.store
            .insert_flow(&ProviderFlow {
                id: secrets::token_id(&state),
                kind: FlowKind::Start,
                provider: provider.to_string(),
                browser: self.browser_mac(&cookie),
                payload: json!({ "return": return_to }),
                created_at: now,
                expires_at: now.saturating_add(PROVIDER_FLOW_TTL),
                used_at: None,
            })
            .await?;
        Ok(ProviderStart {
            nonce: crate::b64(&self.cipher.form_mac("idp-nonce", state.as_bytes())),
            pkce_verifier: crate::b64(&self.cipher.form_mac("idp-pkce", state.as_bytes())),
            state,
            cookie,
        })
    }

    /// The provider `provider` sent the browser back with `state`; `cookie`
    /// is the browser's flow cookie. The flow's row must exist, be of this
    /// provider, unexpired, unspent and bound to this cookie; it is spent
    /// here whatever follows, so a `state` works once. Anything else is one
    /// `invalid_request`.
    pub async fn provider_return(
        &self,
        provider: &str,
        state: &str,
        cookie: Option<&str>,
    ) -> Result<ProviderReturn> {
        let fed = self.federation()?;
        let bad =
            || Error::invalid_request("this sign-in has expired or was already used; start again");
        if state.is_empty() || state.len() > MAX_STATE {
            return Err(bad());
        }
        let id = secrets::token_id(state);
        let flow = self
            .live_flow(&fed, &id, FlowKind::Start, provider, cookie)
            .await?;
        if !fed.store.spend_flow(&flow.id, self.now()).await? {
            return Err(bad());
        }
        Ok(ProviderReturn {
            return_to: return_to(&flow.payload),
            nonce: crate::b64(&self.cipher.form_mac("idp-nonce", state.as_bytes())),
            pkce_verifier: crate::b64(&self.cipher.form_mac("idp-pkce", state.as_bytes())),
        })
    }

    /// The unspent, unexpired row `id` of `kind` for `provider`, bound to
    /// the browser's `cookie` (compared in constant time).
    async fn live_flow(
        &self,
        fed: &Federation,
        id: &str,
        kind: FlowKind,
        provider: &str,
        cookie: Option<&str>,
    ) -> Result<ProviderFlow> {
        let bad =
            || Error::invalid_request("this sign-in has expired or was already used; start again");
        let Some(flow) = fed.store.flow(id).await? else {
            return Err(bad());
        };
        if flow.kind != kind
            || flow.provider != provider
            || flow.used_at.is_some()
            || flow.expires_at <= self.now()
        {
            return Err(bad());
        }
        let Some(cookie) = cookie else {
            return Err(Error::invalid_request(
                "this browser did not start this sign-in (its cookie is missing); start again",
            ));
        };
        let mac = self.browser_mac(cookie);
        if !bool::from(mac.as_bytes().ct_eq(flow.browser.as_bytes())) {
            return Err(Error::invalid_request(
                "this browser did not start this sign-in; start again",
            ));
        }
        Ok(flow)
    }

    /// Who `up` (checked by the provider's client) signs in for `req`:
    ///
    /// 1. a known (issuer, subject) signs its account in;
    /// 2. a new pair whose address matches an account, when the provider
    ///    says the address is verified: with `link = "verified_email"`,
    ///    linked at once if the provider is trusted for e-mail and the
    ///    account's address is verified; with `"confirm"`, a page asks for
    ///    the account's password (an account without one is not linked);
    /// 3. otherwise, with sign-up on, a new account (with the provider's
    ///    address unless another account has it; verified only when the
    ///    provider is trusted and says so);
    /// 4. else refused (`InvalidInput`, shown on a page).
    ///
    /// An address the provider does not say is verified never links an
    /// account.
    pub async fn federated_sign_in(
        &self,
        req: &AuthorizeRequest,
        up: &UpstreamIdentity,
        return_to: ReturnTo,
    ) -> Result<Federated> {
        let fed = self.federation()?;
        let policy = self.policy(&fed, &up.provider)?.clone();
        if let Some(known) = fed.store.identity(&up.issuer, &up.subject).await? {
            let Some(user) = self.user(&known.sub).await? else {
                return Err(refused(
                    "the account linked to this identity cannot sign in",
                ));
            };
            tracing::info!(provider = %up.provider, "signed in through a provider");
            return Ok(Federated::SignedIn(self.federated(
                req,
                &user,
                &up.provider,
            )?));
        }
        let email = up
            .email
            .as_deref()
            .map(normalize_address)
            .filter(|a| plausible_address(a));
        let owner = match &email {
            Some(address) => fed.store.find_by_email(address).await?,
            None => None,
        };
        if let Some(owner) = owner.as_ref().filter(|o| up.email_verified && !o.disabled) {
            match policy.link {
                LinkMode::VerifiedEmail if policy.trust_email && owner.email_verified => {
                    if let Some(user) = self.user(&owner.sub).await? {
                        self.link(&fed, owner, up).await?;
                        return Ok(Federated::SignedIn(self.federated(
                            req,
                            &user,
                            &up.provider,
                        )?));
                    }
                }
                LinkMode::Confirm => {
                    let has_password = self
                        .repo
                        .find_user(&owner.sub)
                        .await?
                        .is_some_and(|c| !c.password_hash.is_empty());
                    if has_password {
                        return self.await_confirmation(&fed, owner, up, return_to).await;
                    }
                }
                _ => {}
            }
        }
        if !self.config.sign_up {
            return Err(refused(format!(
                "no account here is linked to this {} identity, and this server does not \
                 create accounts",
                policy.name
            )));
        }
        // Another account's address is left out; under `required`, so is
        // an address nobody vouched for (the account could never sign in).
        let vouched = policy.trust_email && up.email_verified;
        let address = email
            .filter(|_| owner.is_none())
            .filter(|_| self.verification() != Verification::Required || vouched);
        let verified = vouched && address.is_some();
        let user = self
            .create_federated(&fed, up, address.as_deref(), verified)
            .await?;
        Ok(Federated::SignedIn(self.federated(
            req,
            &user,
            &up.provider,
        )?))
    }

    /// [`AuthServer::signed_in`] through the provider `idp`.
    fn federated(&self, req: &AuthorizeRequest, user: &UserRecord, idp: &str) -> Result<SignedIn> {
        Ok(SignedIn {
            idp: Some(idp.to_string()),
            ..self.signed_in(req, user)?
        })
    }

    /// Links `up` to `owner` and tells the owner.
    async fn link(
        &self,
        fed: &Federation,
        owner: &AccountProfile,
        up: &UpstreamIdentity,
    ) -> Result<()> {
        let record = self.identity_record(&owner.sub, up);
        if !fed.store.link(&record).await? {
            return Err(refused(
                "this identity was linked to an account meanwhile; sign in again",
            ));
        }
        tracing::info!(provider = %up.provider, "identity linked to an existing account");
        self.link_notice(owner, up).await;
        Ok(())
    }

    fn identity_record(&self, sub: &str, up: &UpstreamIdentity) -> IdentityRecord {
        IdentityRecord {
            id: token_string(self.random.as_ref(), 12),
            sub: sub.to_string(),
            provider: up.provider.clone(),
            issuer: up.issuer.clone(),
            subject: up.subject.clone(),
            email: up.email.as_deref().map(normalize_address),
            linked_at: self.now(),
        }
    }

    /// The row that waits for `owner`'s password, and the page's handle.
    async fn await_confirmation(
        &self,
        fed: &Federation,
        owner: &AccountProfile,
        up: &UpstreamIdentity,
        return_to: ReturnTo,
    ) -> Result<Federated> {
        let handle = token_string(self.random.as_ref(), 32);
        let cookie = token_string(self.random.as_ref(), 32);
        let now = self.now();
        fed.store
            .insert_flow(&ProviderFlow {
                id: secrets::token_id(&handle),
                kind: FlowKind::Link,
                provider: up.provider.clone(),
                browser: self.browser_mac(&cookie),
                payload: json!({
                    "return": return_to,
                    "sub": owner.sub,
                    "issuer": up.issuer,
                    "subject": up.subject,
                    "email": up.email,
                }),
                created_at: now,
                expires_at: now.saturating_add(PROVIDER_FLOW_TTL),
                used_at: None,
            })
            .await?;
        Ok(Federated::Confirm {
            handle,
            cookie,
            username: owner.username.clone(),
        })
    }

    /// The page that asked for the account's password was posted: `handle`
    /// names the waiting row (bound to the browser's flow `cookie`); the
    /// password is checked as every login checks it (throttled; a wrong
    /// one leaves the row for another try). Then the row is spent, the
    /// identity linked and the owner told. Answers the request to
    /// continue, and who signed in (through `provider`).
    pub async fn provider_confirm_link(
        &self,
        provider: &str,
        handle: &str,
        password: &str,
        cookie: Option<&str>,
        from: Option<IpAddr>,
    ) -> Result<(ReturnTo, UserRecord)> {
        let fed = self.federation()?;
        if handle.is_empty() || handle.len() > MAX_STATE {
            return Err(Error::invalid_request(
                "this sign-in has expired; start again",
            ));
        }
        let flow = self
            .live_flow(
                &fed,
                &secrets::token_id(handle),
                FlowKind::Link,
                provider,
                cookie,
            )
            .await?;
        let p = &flow.payload;
        let (Some(sub), Some(issuer), Some(subject)) = (
            p["sub"].as_str(),
            p["issuer"].as_str(),
            p["subject"].as_str(),
        ) else {
            return Err(Error::server("a link row lacks its identity"));
        };
        let Some(owner) = self.account_profile(sub).await? else {
            return Err(refused("the account no longer exists"));
        };
        let user = self
            .check_user_password(&owner.username, password, from)
            .await?;
        if !fed.store.spend_flow(&flow.id, self.now()).await? {
            return Err(Error::invalid_request(
                "this sign-in was already used; start again",
            ));
        }
        let up = UpstreamIdentity {
            provider: provider.to_string(),
            issuer: issuer.to_string(),
            subject: subject.to_string(),
            email: p["email"].as_str().map(str::to_string),
            email_verified: true,
            username_hint: None,
        };
        self.link(&fed, &owner, &up).await?;
        Ok((return_to(p), user))
    }

    /// [`AuthServer::signed_in`] after [`AuthServer::provider_confirm_link`].
    pub fn confirmed_sign_in(
        &self,
        req: &AuthorizeRequest,
        user: &UserRecord,
        provider: &str,
    ) -> Result<SignedIn> {
        self.federated(req, user, provider)
    }

    /// A new account for `up`, linked to it in the same transaction, under
    /// the first free name among the provider's hint and its variants.
    async fn create_federated(
        &self,
        fed: &Federation,
        up: &UpstreamIdentity,
        address: Option<&str>,
        verified: bool,
    ) -> Result<UserRecord> {
        let now = self.now();
        let credential = UserRecord {
            username: String::new(),
            // No password: this account signs in through its identities
            // until a reset gives it one.
            password_hash: String::new(),
            scopes: self.config.sign_up_scopes.clone(),
            claims: Claims::new(),
            created_at: now,
            updated_at: now,
        };
        let base = name_hint(up);
        for attempt in 0..NAME_ATTEMPTS {
            let name = match attempt {
                0 => base.clone(),
                1..3 => format!("{base}-{}", attempt + 1),
                _ => format!("{base}-{}", token_string(self.random.as_ref(), 4)),
            };
            let record = self.identity_record("", up);
            match fed
                .store
                .create_linked(&name, address, verified, &credential, &record)
                .await
            {
                Ok(Some(profile)) => {
                    tracing::info!(provider = %up.provider, "account created through a provider");
                    return self
                        .user(&profile.sub)
                        .await?
                        .ok_or_else(|| Error::server("an account just created is missing"));
                }
                Ok(None) => continue,
                Err(Error::Conflict(_)) => {
                    return Err(refused(
                        "this identity was linked to an account meanwhile; sign in again",
                    ));
                }
                Err(e) => return Err(e),
            }
        }
        Err(refused("no free user name was found for this identity"))
    }

    /// Tells the account that an identity was linked to it,
    /// through the e-mail flows' outbox when they are on and the account
    /// has an address. A failure is logged: the link stands.
    async fn link_notice(&self, owner: &AccountProfile, up: &UpstreamIdentity) {
        let (Ok(flows), Some(address)) = (self.flows(), owner.email.as_deref()) else {
            return;
        };
        let provider = self
            .providers()
            .iter()
            .find(|p| p.id == up.provider)
            .map_or(up.provider.as_str(), |p| p.name.as_str());
        let mail = FlowMail {
            to: address.to_string(),
            subject: format!("{provider} sign-in linked to your account"),
            text: format!(
                "A {provider} identity was linked to your account \"{username}\" at {issuer}: \
                 from now on it signs in as you.\n\n\
                 If it was not you, sign in, remove it from your linked identities and \
                 change your password.\n",
                issuer = self.config.issuer,
                username = owner.username,
            ),
        };
        if let Err(e) = self
            .send_account_notice(&flows, owner, &normalize_address(address), &mail)
            .await
        {
            tracing::warn!(
                cause = e.internal_cause().unwrap_or(e.description()),
                "a link notice could not be written"
            );
        }
    }

    /// `GET {base}/auth/identities`: the identities linked to `sub`.
    pub async fn identities(&self, sub: &str) -> Result<Vec<IdentityRecord>> {
        let fed = self.federation()?;
        Ok(fed.store.identities(sub).await?)
    }

    /// `DELETE {base}/auth/identities/{id}`: unlinks one of `sub`'s
    /// identities; `NotFound` when it has none such, `Conflict` when it is
    /// the account's last way to sign in (no password, no other identity).
    pub async fn unlink_identity(&self, sub: &str, id: &str) -> Result<()> {
        let fed = self.federation()?;
        let all = fed.store.identities(sub).await?;
        if !all.iter().any(|i| i.id == id) {
            return Err(Error::NotFound("no such identity".into()));
        }
        let has_password = self
            .repo
            .find_user(sub)
            .await?
            .is_some_and(|c| !c.password_hash.is_empty());
        if !has_password && all.len() < 2 {
            return Err(last_way());
        }
        // Checked again by the delete itself: another unlink may have
        // taken the account's other way to sign in meanwhile.
        if !fed.store.unlink(sub, id).await? {
            return Err(
                if fed.store.identities(sub).await?.iter().any(|i| i.id == id) {
                    last_way()
                } else {
                    Error::NotFound("no such identity".into())
                },
            );
        }
        tracing::info!("identity unlinked");
        Ok(())
    }
}

/// The refusal to unlink an account's last way to sign in.
fn last_way() -> Error {
    Error::Conflict(
        "this identity is the account's last way to sign in: set a password or link another \
         identity first"
            .into(),
    )
}

/// The request a flow row continues.
fn return_to(payload: &Value) -> ReturnTo {
    payload["return"]
        .as_array()
        .map(|pairs| {
            pairs
                .iter()
                .filter_map(|p| Some((p[0].as_str()?.to_string(), p[1].as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// A user name to start from: the provider's hint, else the address's
/// local part, else `user`, kept to the characters names may hold.
fn name_hint(up: &UpstreamIdentity) -> String {
    let raw = up
        .username_hint
        .clone()
        .or_else(|| {
            up.email
                .as_deref()
                .and_then(|e| e.split('@').next())
                .map(str::to_string)
        })
        .unwrap_or_default();
    let cleaned: String = raw
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '~'))
        .take(MAX_HINTED_NAME)
        .collect();
    if cleaned.is_empty() {
        "user".to_string()
    } else {
        cleaned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(hint: Option<&str>, email: Option<&str>) -> UpstreamIdentity {
        UpstreamIdentity {
            provider: "corp".into(),
            issuer: "https://idp.example".into(),
            subject: "s".into(),
            email: email.map(str::to_string),
            email_verified: false,
            username_hint: hint.map(str::to_string),
        }
    }

    #[test]
    fn a_name_comes_from_the_hint_then_the_address() {
        assert_eq!(name_hint(&up(Some("Ada Lovelace!"), None)), "AdaLovelace");
        assert_eq!(name_hint(&up(None, Some("ada.l@example.com"))), "ada.l");
        assert_eq!(name_hint(&up(Some("éé"), None)), "user");
        assert_eq!(name_hint(&up(None, None)), "user");
    }
}
