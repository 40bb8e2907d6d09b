//! The e-mail flows' decisions: verification at sign-up
//! (`off`, `optional`, `required`, with "Resend"), password reset and
//! e-mail change, each by link or code, with the limits and the answers that never tell
//! whether an address has an account (sign-up only under `required`). No HTTP and no HTML here: `gatehouse-oauth`
//! renders the pages; storage is a [`MailFlows`].
//!
//! - **Same answer, same time.** Asking for a reset returns at once with a
//!   flow id, whatever the address: looking the address up, the limits and
//!   writing the token and its message happen after the answer, in a task
//!   of their own, so neither the page, its status nor its timing depends
//!   on whether an account has the address.
//! - **Links never come from a request.** They are built from
//!   [`EmailFlowConfig::link_base`] (the configured issuer and base path).
//! - **Tokens are hashed and bound.** A link is 256 random bits, a code 8
//!   digits; both are stored as MACs under the forms key, the code's bound
//!   to its token's id, so a code is only ever checked against the token
//!   of the page it was typed on. A token serves one purpose, one account
//!   and one address, once.

use std::net::IpAddr;

use subtle::ConstantTimeEq;

use super::*;
use crate::accounts::AccountProfile;
use crate::flows::{
    CODE_DIGITS, EmailFlowConfig, FlowEffect, FlowMail, FlowPurpose, FlowToken, MAIL_INTERVAL,
    MAILS_PER_HOUR, MailFlows, Verification,
};

/// What a sign-up leads to.
#[derive(Debug, Clone)]
pub enum SignedUp {
    /// The account exists and may sign in: on to consent or the code.
    SignedIn(SignedIn),
    /// The "check your e-mail" page of the flow with this id: a
    /// verification message (or, under `required` for an address that
    /// has an account, a notice to its owner) is on its way.
    CheckEmail(String),
}

/// The parameters of the authorization request a flow returns to, as
/// name/value pairs ([`AuthorizeParams::pairs`]); empty when it started
/// elsewhere.
pub type ReturnTo = Vec<(String, String)>;

/// Longest e-mail address accepted (RFC 5321 §4.5.3.1.3: a path is at most
/// 256 octets, brackets included).
pub const MAX_ADDRESS: usize = 254;

/// The flows' storage and settings ([`AuthServer::use_mail_flows`]).
#[derive(Debug)]
pub(crate) struct Flows {
    store: Arc<dyn MailFlows>,
    config: EmailFlowConfig,
}

/// An address as flows compare and store it: trimmed, lowercase (the
/// contract compares addresses without regard to case).
pub fn normalize_address(address: &str) -> String {
    address.trim().to_lowercase()
}

/// Whether `address` looks like an address at all (one `@` with text on
/// both sides, no spaces or controls): what the form refuses before
/// anything else, the same for every address.
pub fn plausible_address(address: &str) -> bool {
    let Some((local, domain)) = address.split_once('@') else {
        return false;
    };
    !local.is_empty()
        && !domain.is_empty()
        && !domain.contains('@')
        && address.len() <= MAX_ADDRESS
        && !address.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// What a wrong, spent, expired or unknown code or link is told: one
/// answer for all of them.
fn dead_token() -> Error {
    Error::InvalidGrant("the code is wrong, or the link or code has expired or was used".into())
}

impl AuthServer {
    /// Turns on the e-mail flows: `store` writes their tokens and messages
    /// (called once, at start, when `[email]` is set and the account type
    /// has an `email` field; a second call is ignored).
    pub fn use_mail_flows(&self, store: Arc<dyn MailFlows>, config: EmailFlowConfig) {
        let _ = self.flows.set(Arc::new(Flows { store, config }));
    }

    /// Whether the e-mail flows are on.
    pub fn mail_flows_on(&self) -> bool {
        self.flows.get().is_some()
    }

    /// The flows' settings, when they are on.
    pub fn mail_flow_config(&self) -> Option<&EmailFlowConfig> {
        self.flows.get().map(|f| &f.config)
    }

    pub(super) fn flows(&self) -> Result<Arc<Flows>> {
        self.flows
            .get()
            .cloned()
            .ok_or_else(|| Error::invalid_request("e-mail is not set up on this server"))
    }

    /// "Forgot password?": answers at once with the id the "check your
    /// e-mail" page carries, whether or not an account has `address`; the
    /// message (a link and a code) is written, with its token, after the
    /// answer, and only when an account has the address, the address is
    /// under its limits and the client address is not throttled. Each
    /// request counts as a failure of the client address.
    pub fn forgot_password(
        self: &Arc<Self>,
        address: &str,
        return_to: ReturnTo,
        from: Option<IpAddr>,
    ) -> Result<String> {
        let flows = self.flows()?;
        let address = normalize_address(address);
        if !plausible_address(&address) {
            return Err(Error::InvalidInput("enter an e-mail address".into()));
        }
        let id = token_string(self.random.as_ref(), 16);
        if !self.count_mail_request(from, "password reset") {
            return Ok(id);
        }
        let server = self.clone();
        let flow_id = id.clone();
        tokio::spawn(async move {
            if let Err(e) = server
                .send_reset(&flows, &flow_id, &address, return_to)
                .await
            {
                tracing::warn!(
                    cause = e.internal_cause().unwrap_or(e.description()),
                    "a password reset message could not be written"
                );
            }
        });
        Ok(id)
    }

    /// Writes a reset token and its message for the account of `address`,
    /// if there is one and the address is under its limits.
    async fn send_reset(
        &self,
        flows: &Flows,
        id: &str,
        address: &str,
        return_to: ReturnTo,
    ) -> Result<()> {
        let Some(account) = flows.store.find_by_email(address).await? else {
            return Ok(());
        };
        if account.disabled || !self.may_mail(flows, address).await? {
            return Ok(());
        }
        // A reset goes to the account's address whether verified or not.
        let to = account.email.clone().unwrap_or_else(|| address.to_string());
        let (token, link, code) = self.new_token(
            flows,
            id,
            FlowPurpose::Reset,
            Some(account.sub.clone()),
            address,
            flows.config.reset_ttl,
            return_to,
        );
        let minutes = flows.config.reset_ttl.div_ceil(60);
        let code_minutes = flows.config.code_ttl.div_ceil(60);
        let mail = FlowMail {
            to,
            subject: "Reset your password".into(),
            text: format!(
                "Someone asked to reset the password of the account \"{username}\" at {issuer}.\n\n\
                 To choose a new password, open this link (it works for {minutes} minutes, once):\n\n\
                 {url}/auth/reset?token={link}\n\n\
                 Or type this code on the page where you asked (it works for {code_minutes} minutes):\n\n\
                 {code}\n\n\
                 If you did not ask, ignore this message: your password stays as it is.\n",
                username = account.username,
                issuer = self.config.issuer,
                url = flows.config.link_base,
            ),
        };
        if flows.store.send(&token, &mail).await? {
            tracing::info!("password reset message written");
        } else {
            tracing::info!("flow message not sent: the address is over its limits");
        }
        Ok(())
    }

    /// Whether `address` may receive another message now: fewer than
    /// [`MAILS_PER_HOUR`] in the last hour, none in the last
    /// [`MAIL_INTERVAL`] seconds.
    async fn may_mail(&self, flows: &Flows, address: &str) -> Result<bool> {
        let now = self.now();
        let (count, last) = flows.store.mails_since(address, now - 3600).await?;
        let ok = count < MAILS_PER_HOUR && last.is_none_or(|t| now - t >= MAIL_INTERVAL);
        if !ok {
            tracing::info!("flow message not sent: the address is over its limits");
        }
        Ok(ok)
    }

    /// A new token with its link and code (returned in clear once, for the
    /// message).
    #[allow(clippy::too_many_arguments)]
    fn new_token(
        &self,
        flows: &Flows,
        id: &str,
        purpose: FlowPurpose,
        sub: Option<String>,
        address: &str,
        ttl: u64,
        return_to: ReturnTo,
    ) -> (FlowToken, String, String) {
        let now = self.now();
        let link = token_string(self.random.as_ref(), 32);
        let mut n = [0u8; 8];
        self.random.fill(&mut n);
        let code = format!(
            "{:0width$}",
            u64::from_be_bytes(n) % 10u64.pow(CODE_DIGITS as u32),
            width = CODE_DIGITS
        );
        let expires_at = now.saturating_add(AuthConfig::secs(ttl));
        let token = FlowToken {
            id: id.to_string(),
            purpose,
            sub,
            address: address.to_string(),
            link_hash: Some(self.link_hash(&link)),
            code_hash: Some(self.code_hash(id, &code)),
            payload: json!({ "return": return_to }),
            created_at: now,
            expires_at,
            code_expires_at: expires_at
                .min(now.saturating_add(AuthConfig::secs(flows.config.code_ttl))),
            attempts: 0,
            used_at: None,
        };
        (token, link, code)
    }

    fn link_hash(&self, link: &str) -> String {
        crate::b64(&self.cipher.form_mac("email-link", link.as_bytes()))
    }

    fn code_hash(&self, id: &str, code: &str) -> String {
        crate::b64(
            &self
                .cipher
                .form_mac("email-code", format!("{id}:{code}").as_bytes()),
        )
    }

    /// The live token of a link, to show its page (never spends it: mail
    /// scanners open links). A dead or unknown link is `InvalidGrant`.
    pub async fn email_link(&self, link: &str) -> Result<FlowToken> {
        let flows = self.flows()?;
        if link.is_empty() || link.len() > 128 {
            return Err(dead_token());
        }
        match flows.store.token_by_link(&self.link_hash(link)).await? {
            Some(t) if t.link_live(self.now()) => Ok(t),
            _ => Err(dead_token()),
        }
    }

    /// Sets a new password through a reset link; returns where the flow
    /// goes back to.
    pub async fn reset_by_link(
        &self,
        link: &str,
        password: &str,
        from: Option<IpAddr>,
    ) -> Result<ReturnTo> {
        let now = self.now();
        self.logins
            .check_address(from, now)
            .map_err(too_many_failures)?;
        check_new_password(password)?;
        let token = self.live_link(link, FlowPurpose::Reset, from).await?;
        self.finish_reset(&token, password).await
    }

    /// Sets a new password with the code of the flow `id` (the page's);
    /// a wrong code counts against the token ([`crate::MAX_CODE_ATTEMPTS`]
    /// cancel it, link included) and against the client address.
    pub async fn reset_by_code(
        &self,
        id: &str,
        code: &str,
        password: &str,
        from: Option<IpAddr>,
    ) -> Result<ReturnTo> {
        let now = self.now();
        self.logins
            .check_address(from, now)
            .map_err(too_many_failures)?;
        check_new_password(password)?;
        let token = self.check_code(id, code, FlowPurpose::Reset, from).await?;
        self.finish_reset(&token, password).await
    }

    /// The live token of the link `link`, of `purpose`; a dead link, or
    /// one of another purpose, counts against the client address.
    async fn live_link(
        &self,
        link: &str,
        purpose: FlowPurpose,
        from: Option<IpAddr>,
    ) -> Result<FlowToken> {
        match self.email_link(link).await {
            Ok(t) if t.purpose == purpose => Ok(t),
            Ok(_) | Err(Error::InvalidGrant(_)) => {
                self.logins.failed_address(from, self.now());
                Err(dead_token())
            }
            Err(e) => Err(e),
        }
    }

    /// Whether a request for a message (`what`: "password reset", ...)
    /// from the client address `from` goes on: a throttled address is
    /// answered as any other, with nothing sent; each request counts as a
    /// failure of the address, like a wrong password.
    fn count_mail_request(&self, from: Option<IpAddr>, what: &str) -> bool {
        let now = self.now();
        if self.logins.check_address(from, now).is_err() {
            tracing::info!(?from, "{what} not sent: the client address is throttled");
            return false;
        }
        self.logins.failed_address(from, now);
        true
    }

    /// The live token `id` of `purpose` whose code is `code`; otherwise a
    /// dead-token error, the wrong code counted.
    async fn check_code(
        &self,
        id: &str,
        code: &str,
        purpose: FlowPurpose,
        from: Option<IpAddr>,
    ) -> Result<FlowToken> {
        let flows = self.flows()?;
        let now = self.now();
        let code = code.trim();
        let token = if id.is_empty() || id.len() > 64 {
            None
        } else {
            flows.store.token(id).await?
        };
        let Some(token) = token.filter(|t| t.purpose == purpose && t.code_live(now)) else {
            self.logins.failed_address(from, now);
            return Err(dead_token());
        };
        let expected = token.code_hash.as_deref().unwrap_or("");
        let given = self.code_hash(id, code);
        if code.len() != CODE_DIGITS || !bool::from(expected.as_bytes().ct_eq(given.as_bytes())) {
            flows.store.wrong_code(id).await?;
            self.logins.failed_address(from, now);
            return Err(dead_token());
        }
        Ok(token)
    }

    async fn finish_reset(&self, token: &FlowToken, password: &str) -> Result<ReturnTo> {
        let flows = self.flows()?;
        let Some(sub) = token.sub.as_deref() else {
            return Err(dead_token());
        };
        let hash = self.admin().hash_new_password(password).await?;
        let now = self.now();
        let credential = match self.repo.find_user(sub).await? {
            Some(existing) => UserRecord {
                password_hash: hash,
                updated_at: now,
                ..existing
            },
            // An account made by a bypass caller has no credential yet: it
            // gets what every account not made by the CLI gets.
            None => UserRecord {
                username: sub.to_string(),
                password_hash: hash,
                scopes: self.config.sign_up_scopes.clone(),
                claims: Claims::new(),
                created_at: now,
                updated_at: now,
            },
        };
        if !flows
            .store
            .complete(
                token,
                FlowEffect::SetPassword {
                    credential: &credential,
                },
                now,
            )
            .await?
        {
            return Err(dead_token());
        }
        // Every token of the account was revoked in that transaction.
        self.revoked();
        tracing::info!("password reset");
        Ok(return_to(token))
    }
}

impl AuthServer {
    /// How sign-up verifies addresses: `Off` when the server sends no
    /// e-mail, whatever `[auth.email] verification` says.
    pub fn verification(&self) -> Verification {
        self.flows
            .get()
            .map_or(Verification::Off, |f| f.config.verification)
    }

    /// Whether the sign-up page asks for an e-mail address (the account
    /// type has `email`).
    pub fn sign_up_asks_email(&self) -> bool {
        self.accounts.get().is_some_and(|a| a.has_email())
    }

    /// Whether `profile` may not sign in yet: under `required`, an
    /// account whose address is not confirmed.
    pub(crate) fn awaits_verification(&self, profile: &AccountProfile) -> bool {
        self.verification() == Verification::Required
            && profile.email.is_some()
            && !profile.email_verified
    }

    /// The sign-up form's address, normalized: `None` when the account
    /// type has no `email` or none was given (and none is required).
    pub(crate) fn sign_up_address(&self, email: &str) -> Result<Option<String>> {
        if !self.sign_up_asks_email() {
            return Ok(None);
        }
        let address = normalize_address(email);
        if address.is_empty() && self.verification() != Verification::Required {
            return Ok(None);
        }
        if !plausible_address(&address) {
            return Err(Error::InvalidInput("enter an e-mail address".into()));
        }
        Ok(Some(address))
    }

    /// Sends the account `sub` just signed up a verification message for
    /// `address`; returns the id its "check your e-mail" page carries
    /// (the page is the same when the address is over its limits and
    /// nothing was sent).
    pub(crate) async fn send_verification(
        &self,
        sub: &str,
        username: &str,
        address: &str,
        return_to: ReturnTo,
    ) -> Result<String> {
        let flows = self.flows()?;
        let id = token_string(self.random.as_ref(), 16);
        self.send_verify(
            &flows,
            &id,
            Some(sub.to_string()),
            username,
            address,
            return_to,
            None,
        )
        .await?;
        Ok(id)
    }

    /// Sign-up under `required` with an address: no account yet. The
    /// answer is the same "check your e-mail" page whether or not an
    /// account has the address, given at once; after it, in a task of its
    /// own, the address gets either a verification message whose token
    /// carries the pending registration (the name, the password's argon2
    /// hash, the sign-up scopes) or, when an account has it, a notice.
    pub(crate) async fn sign_up_pending(
        self: &Arc<Self>,
        username: &str,
        address: &str,
        password: &str,
        return_to: ReturnTo,
        from: Option<IpAddr>,
    ) -> Result<SignedUp> {
        let flows = self.flows()?;
        let taken = match self.accounts.get() {
            Some(accounts) => accounts.find_by_username(username).await?.is_some(),
            None => false,
        };
        if taken {
            self.logins.failed_address(from, self.now());
            return Err(Error::InvalidInput(
                "this user name is not available".into(),
            ));
        }
        let hash = self.admin().hash_new_password(password).await?;
        let id = token_string(self.random.as_ref(), 16);
        let server = self.clone();
        let (flow_id, username, address) = (id.clone(), username.to_string(), address.to_string());
        tokio::spawn(async move {
            let pending = json!({
                "username": username,
                "password_hash": hash,
                "scopes": server.config.sign_up_scopes,
            });
            if let Err(e) = server
                .send_pending(&flows, &flow_id, &username, &address, return_to, pending)
                .await
            {
                tracing::warn!(
                    cause = e.internal_cause().unwrap_or(e.description()),
                    "a verification message could not be written"
                );
            }
        });
        tracing::info!(?from, "sign-up pending until its address is confirmed");
        Ok(SignedUp::CheckEmail(id))
    }

    /// The pending registration's message, or the notice to the owner of
    /// an address that already has an account.
    async fn send_pending(
        &self,
        flows: &Flows,
        id: &str,
        username: &str,
        address: &str,
        return_to: ReturnTo,
        pending: Value,
    ) -> Result<()> {
        match flows.store.find_by_email(address).await? {
            Some(owner) => self.send_notice(flows, &owner, address).await,
            None => {
                self.send_verify(flows, id, None, username, address, return_to, Some(pending))
                    .await
            }
        }
    }

    /// Tells the owner of `address` that someone signed up with it.
    async fn send_notice(
        &self,
        flows: &Flows,
        owner: &AccountProfile,
        address: &str,
    ) -> Result<()> {
        let text = format!(
            "Someone tried to create an account at {issuer} with this e-mail address, \
             which already belongs to the account \"{username}\". No account was created.\n\n\
             If it was you, sign in as \"{username}\" instead; if you forgot the password, \
             use \"Forgot password?\" on the sign-in page.\n\n\
             If it was not you, ignore this message: nothing changed.\n",
            issuer = self.config.issuer,
            username = owner.username,
        );
        self.notify(
            flows,
            owner,
            address,
            "Someone tried to sign up with your address",
            text,
        )
        .await
    }

    /// Writes a notice (no link, no code) to `owner` at `address`, when
    /// the account is not disabled and the address is under its limits;
    /// its row counts towards them.
    async fn notify(
        &self,
        flows: &Flows,
        owner: &AccountProfile,
        address: &str,
        subject: &str,
        text: String,
    ) -> Result<()> {
        let mail = FlowMail {
            to: owner.email.clone().unwrap_or_else(|| address.to_string()),
            subject: subject.to_string(),
            text,
        };
        if self
            .send_account_notice(flows, owner, address, &mail)
            .await?
        {
            tracing::info!("notice written");
        }
        Ok(())
    }

    /// Writes a notice (no token) for `owner` at `address` with the
    /// flows' limits: the one path of every notice. `false` when the
    /// account is disabled or the address over its limits.
    pub(super) async fn send_account_notice(
        &self,
        flows: &Flows,
        owner: &AccountProfile,
        address: &str,
        mail: &FlowMail,
    ) -> Result<bool> {
        if owner.disabled || !self.may_mail(flows, address).await? {
            return Ok(false);
        }
        let now = self.now();
        let token = FlowToken {
            id: token_string(self.random.as_ref(), 16),
            purpose: FlowPurpose::Notice,
            sub: Some(owner.sub.clone()),
            address: address.to_string(),
            link_hash: None,
            code_hash: None,
            payload: json!({}),
            created_at: now,
            expires_at: now,
            code_expires_at: now,
            attempts: 0,
            used_at: None,
        };
        Ok(flows.store.send(&token, mail).await?)
    }

    /// Writes a verification token and its message for `address`, when
    /// it is under its limits. `sub` is the account's; `None` with
    /// `pending`, the registration the token carries.
    #[allow(clippy::too_many_arguments)]
    async fn send_verify(
        &self,
        flows: &Flows,
        id: &str,
        sub: Option<String>,
        username: &str,
        address: &str,
        return_to: ReturnTo,
        pending: Option<Value>,
    ) -> Result<()> {
        if !self.may_mail(flows, address).await? {
            return Ok(());
        }
        let (mut token, link, code) = self.new_token(
            flows,
            id,
            FlowPurpose::Verify,
            sub,
            address,
            flows.config.verify_ttl,
            return_to,
        );
        if let Some(pending) = pending {
            token.payload["pending"] = pending;
        }
        let hours = flows.config.verify_ttl.div_ceil(3600);
        let code_minutes = flows.config.code_ttl.div_ceil(60);
        let mail = FlowMail {
            to: address.to_string(),
            subject: "Confirm your e-mail address".into(),
            text: format!(
                "Someone signed up as \"{username}\" at {issuer} with this e-mail address.\n\n\
                 To confirm it, open this link (it works for {hours} hours, once):\n\n\
                 {url}/auth/verify?token={link}\n\n\
                 Or type this code on the page where you signed up (it works for {code_minutes} minutes):\n\n\
                 {code}\n\n\
                 If it was not you, ignore this message.\n",
                issuer = self.config.issuer,
                url = flows.config.link_base,
            ),
        };
        if flows.store.send(&token, &mail).await? {
            tracing::info!("verification message written");
        } else {
            tracing::info!("flow message not sent: the address is over its limits");
        }
        Ok(())
    }

    /// "Resend" on a "check your e-mail" page, `id` being the flow of the
    /// sign-up's own message (the page's `origin`: a resend over the
    /// address's limits writes no token, so its page's flow cannot be
    /// renewed in turn). Answers
    /// at once with the id of the new page, whatever `id` is; after the
    /// answer, when `id` is a verification not yet done (its account still
    /// has the address, unconfirmed; or its registration still pending)
    /// and the address is under its limits, a new message is written.
    /// Each request counts as a failure of the client address, like
    /// "Forgot password?".
    pub fn resend_verification(self: &Arc<Self>, id: &str, from: Option<IpAddr>) -> Result<String> {
        let flows = self.flows()?;
        let new_id = token_string(self.random.as_ref(), 16);
        if !self.count_mail_request(from, "verification resend") {
            return Ok(new_id);
        }
        if id.is_empty() || id.len() > 64 {
            return Ok(new_id);
        }
        let server = self.clone();
        let (old, flow_id) = (id.to_string(), new_id.clone());
        tokio::spawn(async move {
            if let Err(e) = server.resend(&flows, &old, &flow_id).await {
                tracing::warn!(
                    cause = e.internal_cause().unwrap_or(e.description()),
                    "a verification message could not be written"
                );
            }
        });
        Ok(new_id)
    }

    async fn resend(&self, flows: &Flows, old: &str, id: &str) -> Result<()> {
        let now = self.now();
        let Some(token) = flows.store.token(old).await? else {
            return Ok(());
        };
        // A token cancelled by wrong codes may be replaced; a spent or
        // expired one may not.
        if token.purpose != FlowPurpose::Verify
            || token.used_at.is_some()
            || now >= token.expires_at
        {
            return Ok(());
        }
        let back = return_to(&token);
        match &token.sub {
            Some(sub) => {
                let Some(accounts) = self.accounts.get() else {
                    return Ok(());
                };
                let Some(account) = accounts.find(sub).await? else {
                    return Ok(());
                };
                let still_its = account
                    .email
                    .as_deref()
                    .is_some_and(|a| normalize_address(a) == token.address);
                if account.disabled || account.email_verified || !still_its {
                    return Ok(());
                }
                self.send_verify(
                    flows,
                    id,
                    Some(sub.clone()),
                    &account.username,
                    &token.address,
                    back,
                    None,
                )
                .await
            }
            None => {
                let Some(pending) = token.payload.get("pending").cloned() else {
                    return Ok(());
                };
                let username = pending
                    .get("username")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                self.send_pending(flows, id, &username, &token.address, back, pending)
                    .await
            }
        }
    }

    /// Confirms an address through a verification link; returns where the
    /// flow goes back to.
    pub async fn verify_by_link(&self, link: &str, from: Option<IpAddr>) -> Result<ReturnTo> {
        let now = self.now();
        self.logins
            .check_address(from, now)
            .map_err(too_many_failures)?;
        let token = self.live_link(link, FlowPurpose::Verify, from).await?;
        self.finish_verify(&token).await
    }

    /// Confirms an address with the code of the flow `id` (the page's),
    /// under the reset's rules for codes.
    pub async fn verify_by_code(
        &self,
        id: &str,
        code: &str,
        from: Option<IpAddr>,
    ) -> Result<ReturnTo> {
        let now = self.now();
        self.logins
            .check_address(from, now)
            .map_err(too_many_failures)?;
        let token = self.check_code(id, code, FlowPurpose::Verify, from).await?;
        self.finish_verify(&token).await
    }

    /// Spends a verification token: the account's address is verified,
    /// or the pending registration becomes an account (verified, with its
    /// credential), in the transaction that spends it. A name taken since
    /// the sign-up is `InvalidInput` (the token stays unspent).
    async fn finish_verify(&self, token: &FlowToken) -> Result<ReturnTo> {
        let flows = self.flows()?;
        let now = self.now();
        if token.sub.is_some() {
            if !flows.store.complete(token, FlowEffect::Verify, now).await? {
                return Err(dead_token());
            }
            tracing::info!("e-mail address verified");
            return Ok(return_to(token));
        }
        let pending = token.payload.get("pending").cloned().unwrap_or_default();
        let text = |k: &str| pending.get(k).and_then(Value::as_str).map(str::to_string);
        let (Some(username), Some(hash)) = (text("username"), text("password_hash")) else {
            return Err(dead_token());
        };
        let scopes = pending
            .get("scopes")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        let credential = UserRecord {
            username: username.clone(),
            password_hash: hash,
            scopes,
            claims: Claims::new(),
            created_at: now,
            updated_at: now,
        };
        match flows
            .store
            .register(token, &username, &credential, now)
            .await
        {
            Ok(Some(_)) => {
                tracing::info!("pending sign-up confirmed: account created");
                Ok(return_to(token))
            }
            Ok(None) => Err(dead_token()),
            Err(Error::Conflict(msg)) => Err(Error::InvalidInput(msg)),
            Err(e) => Err(e),
        }
    }
}

impl AuthServer {
    /// `POST {base}/auth/email`: the account `sub` (its own access token)
    /// asks to move to `email`, giving its `password`. A wrong password is
    /// [`Error::InvalidGrant`] (counted like a failed login) and sends
    /// nothing; a malformed address, or the account's own, is
    /// `InvalidInput`. Otherwise the answer is the same whatever the new
    /// address is: the messages are written after it, in a task of their
    /// own, as for "Forgot password?" (a request from a throttled client
    /// address sends nothing). The new address gets a link and a code
    /// (an [`FlowPurpose::EmailChange`] token bound to the account and the
    /// address), or, when another account has it, a notice to that
    /// account; the current address, when there is one, a notice.
    /// Nothing changes before confirmation.
    pub async fn start_email_change(
        self: &Arc<Self>,
        sub: &str,
        email: &str,
        password: &str,
        from: Option<IpAddr>,
    ) -> Result<()> {
        let flows = self.flows()?;
        let account = match self.accounts.get() {
            Some(accounts) => accounts.find(sub).await?,
            None => None,
        };
        let Some(account) = account else {
            return Err(Error::InvalidToken(
                "the access token does not belong to an account".into(),
            ));
        };
        let address = normalize_address(email);
        if !plausible_address(&address) {
            return Err(Error::InvalidInput("enter an e-mail address".into()));
        }
        let user = self
            .check_user_password(&account.username, password, from)
            .await?;
        if user.username != account.sub {
            return Err(Error::invalid_grant(
                "the resource owner credentials are invalid",
            ));
        }
        if account
            .email
            .as_deref()
            .is_some_and(|a| normalize_address(a) == address)
        {
            return Err(Error::InvalidInput(
                "this is already the account's e-mail address".into(),
            ));
        }
        if !self.count_mail_request(from, "e-mail change") {
            return Ok(());
        }
        let id = token_string(self.random.as_ref(), 16);
        let server = self.clone();
        tokio::spawn(async move {
            if let Err(e) = server
                .send_email_change(&flows, &id, &account, &address)
                .await
            {
                tracing::warn!(
                    cause = e.internal_cause().unwrap_or(e.description()),
                    "an e-mail change message could not be written"
                );
            }
        });
        Ok(())
    }

    /// The messages of an e-mail change of `account` to `address`.
    async fn send_email_change(
        &self,
        flows: &Flows,
        id: &str,
        account: &AccountProfile,
        address: &str,
    ) -> Result<()> {
        let issuer = &self.config.issuer;
        let username = &account.username;
        match flows.store.find_by_email(address).await? {
            Some(owner) if owner.sub != account.sub => {
                let text = format!(
                    "Someone asked to move the account \"{username}\" at {issuer} to this \
                     e-mail address, which already belongs to the account \"{owner}\". \
                     Nothing was changed.\n\n\
                     If it was not you, ignore this message.\n",
                    owner = owner.username,
                );
                self.notify(
                    flows,
                    &owner,
                    address,
                    "Someone tried to use your address for another account",
                    text,
                )
                .await?;
            }
            _ if self.may_mail(flows, address).await? => {
                let (token, link, code) = self.new_token(
                    flows,
                    id,
                    FlowPurpose::EmailChange,
                    Some(account.sub.clone()),
                    address,
                    flows.config.verify_ttl,
                    ReturnTo::new(),
                );
                let hours = flows.config.verify_ttl.div_ceil(3600);
                let code_minutes = flows.config.code_ttl.div_ceil(60);
                let mail = FlowMail {
                    to: address.to_string(),
                    subject: "Confirm your new e-mail address".into(),
                    text: format!(
                        "The account \"{username}\" at {issuer} asked to use this e-mail address.\n\n\
                         To confirm it, open this link (it works for {hours} hours, once):\n\n\
                         {url}/auth/email/confirm?token={link}\n\n\
                         Or give this code to the application where you asked (it works for {code_minutes} minutes):\n\n\
                         {code}\n\n\
                         If it was not you, ignore this message: nothing changes.\n",
                        url = flows.config.link_base,
                    ),
                };
                if flows.store.send(&token, &mail).await? {
                    tracing::info!("e-mail change message written");
                } else {
                    tracing::info!("flow message not sent: the address is over its limits");
                }
            }
            _ => {}
        }
        if let Some(current) = account.email.as_deref() {
            let text = format!(
                "Someone signed in as \"{username}\" at {issuer} asked to change the account's \
                 e-mail address from this one to {address}. It changes only once the new \
                 address is confirmed.\n\n\
                 If it was not you, change your password (\"Forgot password?\" on the sign-in \
                 page sends a link to this address).\n",
            );
            self.notify(
                flows,
                account,
                &normalize_address(current),
                "Your e-mail address is being changed",
                text,
            )
            .await?;
        }
        Ok(())
    }

    /// Confirms an e-mail change through its link (the page's POST).
    /// Returns the new address.
    pub async fn email_change_by_link(&self, link: &str, from: Option<IpAddr>) -> Result<String> {
        let now = self.now();
        self.logins
            .check_address(from, now)
            .map_err(too_many_failures)?;
        let token = self.live_link(link, FlowPurpose::EmailChange, from).await?;
        self.finish_email_change(&token).await
    }

    /// Confirms the latest e-mail change of the account `sub` (its own
    /// access token) with its code, under the reset's rules for codes: a
    /// wrong code counts against that token ([`crate::MAX_CODE_ATTEMPTS`]
    /// cancel it, link included) and against the client address.
    pub async fn email_change_by_code(
        &self,
        sub: &str,
        code: &str,
        from: Option<IpAddr>,
    ) -> Result<String> {
        let flows = self.flows()?;
        let now = self.now();
        self.logins
            .check_address(from, now)
            .map_err(too_many_failures)?;
        let id = flows
            .store
            .latest_token(sub, FlowPurpose::EmailChange)
            .await?
            .map(|t| t.id)
            .unwrap_or_default();
        let token = self
            .check_code(&id, code, FlowPurpose::EmailChange, from)
            .await?;
        if token.sub.as_deref() != Some(sub) {
            return Err(dead_token());
        }
        self.finish_email_change(&token).await
    }

    /// Spends an e-mail change token: the account's `email` becomes the
    /// token's address, verified, in the transaction that spends it. An
    /// address another account took meanwhile is `Conflict` (the token
    /// stays unspent).
    async fn finish_email_change(&self, token: &FlowToken) -> Result<String> {
        let flows = self.flows()?;
        if !flows
            .store
            .complete(token, FlowEffect::ChangeEmail, self.now())
            .await?
        {
            return Err(dead_token());
        }
        tracing::info!("e-mail address changed");
        Ok(token.address.clone())
    }
}

/// The authorization request `token` returns to.
fn return_to(token: &FlowToken) -> ReturnTo {
    token
        .payload
        .get("return")
        .and_then(Value::as_array)
        .map(|pairs| {
            pairs
                .iter()
                .filter_map(|p| {
                    let p = p.as_array()?;
                    Some((
                        p.first()?.as_str()?.to_string(),
                        p.get(1)?.as_str()?.to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A new password set through a flow: the sign-up rule (at least
/// [`MIN_SIGN_UP_PASSWORD`] characters).
fn check_new_password(password: &str) -> Result<()> {
    if password.chars().count() < MIN_SIGN_UP_PASSWORD {
        return Err(Error::InvalidInput(
            "the password must have at least 12 characters".into(),
        ));
    }
    if password.len() > crate::MAX_PASSWORD {
        return Err(Error::InvalidInput("the password is too long".into()));
    }
    Ok(())
}
