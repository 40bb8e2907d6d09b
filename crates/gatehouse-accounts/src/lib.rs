//! Accounts as rows of the schema's `@account` type
//! (`docs/design/accounts.md`).
//!
//! [`StoreAccounts`] answers the authorization server's questions
//! ([`gatehouse_auth::Accounts`]: who signs in as a name, which claims
//! and profile a `sub` has) from the rows, and is the one writer of
//! accounts for the CLI, bootstrap and sign-up: a row and its credential
//! (a [`UserRecord`] keyed by the row's id, in the OAuth tables) are
//! written in one transaction of the entity store.
//!
//! [`AccountHook`] keeps tokens fresh whichever path changes a row
//! (GraphQL, REST, the CLI, a cascade): in the writing transaction, a
//! change of a `@claim` field revokes the account's access tokens, and
//! disabling or deleting it revokes every token and deletes the
//! credential with the row.

#![warn(missing_docs)]

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value as Json, json};

use gatehouse_auth::{
    AccountProfile, Accounts, Claims, Error, FederationStore, FlowEffect, FlowMail, FlowPurpose,
    FlowToken, IdentityRecord, MailFlows, ProviderFlow, RepoError, UserRecord,
};
use gatehouse_auth_store::SqlAuthRepo;
use gatehouse_db::Built;
use gatehouse_mail::Email;
use gatehouse_outbox::Outbox;
use gatehouse_schema::{AccountType, ChangeKind, FieldKind, Model, Scalar, ValueType};
use gatehouse_store::{
    AccessContext, ChangeEvent, CommitHook, EntityStore, Filter, FilterOp, ListQuery, OrderBy, Row,
    Store, StoreError, WriteTxn,
};

/// The rows of the account type as [`gatehouse_auth::Accounts`].
#[derive(Debug, Clone)]
pub struct StoreAccounts {
    store: Store,
    auth: Arc<SqlAuthRepo>,
    account: AccountType,
}

impl StoreAccounts {
    /// The accounts of `store`'s Model, with credentials in `auth` (over
    /// the same database); `None` when the Model has no account type.
    /// Registers the [`AccountHook`] on `store`.
    pub fn new(store: &Store, auth: Arc<SqlAuthRepo>) -> Option<StoreAccounts> {
        let account = store.model().account.clone()?;
        let entity = store.model().entities[account.entity.index()].name.clone();
        store.add_commit_hook(Arc::new(AccountHook {
            auth: auth.clone(),
            account: account.clone(),
            entity,
        }));
        Some(StoreAccounts {
            store: store.clone(),
            auth,
            account,
        })
    }

    fn rows(&self) -> EntityStore {
        self.store.entity_at(self.account.entity)
    }

    /// The accounts `query` lists, read as the server reads them.
    async fn profiles(&self, query: &ListQuery) -> Result<Vec<AccountProfile>, RepoError> {
        let page = self
            .rows()
            .list(&AccessContext::system(), query)
            .await
            .map_err(repo_error)?;
        Ok(page
            .rows
            .into_rows()
            .iter()
            .filter_map(|row| self.profile(row))
            .collect())
    }

    fn profile(&self, row: &Row) -> Option<AccountProfile> {
        let text = |f: &str| row.get(f).and_then(Json::as_str).map(str::to_string);
        let flag = |f: &str| row.get(f).and_then(Json::as_bool).unwrap_or(false);
        let mut claims = Claims::new();
        for c in &self.account.claims {
            match row.get(&c.field) {
                None | Some(Json::Null) => {}
                Some(v) => {
                    claims.insert(c.claim.clone(), v.clone());
                }
            }
        }
        Some(AccountProfile {
            sub: text("id")?,
            username: text(AccountType::USERNAME)?,
            email: text(AccountType::EMAIL),
            email_verified: flag(AccountType::EMAIL_VERIFIED),
            name: text(AccountType::DISPLAY_NAME),
            disabled: flag(AccountType::DISABLED),
            claims,
        })
    }

    /// The row values of `claims`: each claim's field set, every other
    /// `@claim` field null. An unknown claim is `InvalidInput`.
    fn claim_values(&self, claims: &Claims) -> Result<Row, Error> {
        let mut row = Row::new();
        for c in &self.account.claims {
            row.insert(c.field.clone(), Json::Null);
        }
        for (name, value) in claims {
            let Some(field) = self.account.claim_field(name) else {
                let known: Vec<&str> = self
                    .account
                    .claims
                    .iter()
                    .map(|c| c.claim.as_str())
                    .collect();
                return Err(Error::InvalidInput(
                    format!(
                        "the account type has no `@claim` field for the claim {name:?} (its claims: {})",
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    )
                    .into(),
                ));
            };
            row.insert(field.to_string(), self.typed(field, value));
        }
        Ok(row)
    }

    /// `value` for `field`: a string given for a number or Boolean field
    /// (the command line gives every claim as a string) is read as one
    /// when it is one; anything else is left to the store's check.
    fn typed(&self, field: &str, value: &Json) -> Json {
        let entity = &self.store.model().entities[self.account.entity.index()];
        let scalar = entity.field(field).and_then(|f| match &f.kind {
            FieldKind::Value {
                ty: ValueType::Scalar(s),
                list: None,
            } => Some(*s),
            _ => None,
        });
        match (value, scalar) {
            (Json::String(text), Some(Scalar::Int | Scalar::Float | Scalar::Boolean)) => {
                serde_json::from_str(text).unwrap_or_else(|_| value.clone())
            }
            _ => value.clone(),
        }
    }

    /// Writes the account `username` (under the row id `id`, when given)
    /// with `email` (the address, and whether it is verified) and its
    /// credential in `txn`, which is rolled back on every outcome but
    /// `Ok(Some(..))`. `Ok(None)`: the name is taken. An address another
    /// account has (without regard to case) is `Conflict`.
    async fn create_in(
        &self,
        txn: &WriteTxn,
        (username, id): (&str, Option<&str>),
        email: Option<(&str, bool)>,
        claims: &Claims,
        credential: &UserRecord,
    ) -> Result<Option<AccountProfile>, Error> {
        let verified = email.is_some_and(|(_, v)| v);
        let email = email.map(|(a, _)| a);
        let mut row = match self.claim_values(claims) {
            Ok(row) => row,
            Err(e) => {
                txn.rollback().await;
                return Err(e);
            }
        };
        row.retain(|_, v| !v.is_null());
        row.insert(AccountType::USERNAME.into(), json!(username));
        if let Some(id) = id {
            row.insert("id".into(), json!(id));
        }
        let rows = txn.entity_at(self.account.entity);
        let system = AccessContext::system();
        if let Some(address) = email.filter(|_| self.account.email) {
            if let Err(e) = self.address_free(&rows, address, None).await {
                txn.rollback().await;
                return Err(e);
            }
            row.insert(AccountType::EMAIL.into(), json!(address));
        }
        let created = match rows.insert(&system, row).await {
            Ok(created) => created,
            Err(StoreError::Conflict { .. }) => {
                txn.rollback().await;
                return Ok(None);
            }
            Err(e) => {
                txn.rollback().await;
                return Err(store_error(e));
            }
        };
        let Some(mut profile) = self.profile(&created) else {
            txn.rollback().await;
            return Err(Error::from(RepoError::new(
                "a new account row has no id or username",
            )));
        };
        if verified && self.account.email_verified {
            let mut fields = Row::new();
            fields.insert(AccountType::EMAIL_VERIFIED.into(), Json::Bool(true));
            if let Err(e) = rows
                .update_with_server_fields(&system, &profile.sub, Row::new(), fields)
                .await
            {
                txn.rollback().await;
                return Err(store_error(e));
            }
            profile.email_verified = true;
        }
        let credential = UserRecord {
            username: profile.sub.clone(),
            claims: Claims::new(),
            ..credential.clone()
        };
        let statement = self.auth.upsert_user_statement(&credential)?;
        if let Err(e) = txn.execute(statement).await {
            txn.rollback().await;
            return Err(store_error(e));
        }
        Ok(Some(profile))
    }

    /// The account whose `email` is `address`, without regard to case.
    async fn by_email(&self, address: &str) -> Result<Option<AccountProfile>, RepoError> {
        let query = ListQuery {
            filter: Some(Filter::Cmp {
                field: AccountType::EMAIL.into(),
                op: FilterOp::IEq,
                value: json!(address),
            }),
            order: vec![OrderBy {
                field: "id".into(),
                desc: false,
            }],
            limit: Some(1),
            ..ListQuery::default()
        };
        let page = self
            .rows()
            .list(&AccessContext::system(), &query)
            .await
            .map_err(repo_error)?;
        Ok(page
            .rows
            .into_rows()
            .first()
            .and_then(|row| self.profile(row)))
    }

    /// Creates the server's own tables when missing (the credential is
    /// written beside the row).
    async fn tables(&self) -> Result<(), RepoError> {
        self.auth
            .ensure_tables()
            .await
            .map_err(|e| RepoError::new(format!("creating the OAuth tables: {e}")))
    }

    /// `Ok` when no account but `except` has `address` (compared without
    /// regard to case), read through `rows` (a transaction's, so the
    /// answer holds for its write); otherwise `Conflict`.
    async fn address_free(
        &self,
        rows: &EntityStore,
        address: &str,
        except: Option<&str>,
    ) -> Result<(), Error> {
        let query = ListQuery {
            filter: Some(Filter::Cmp {
                field: AccountType::EMAIL.into(),
                op: FilterOp::IEq,
                value: json!(address),
            }),
            limit: Some(2),
            ..ListQuery::default()
        };
        let found = rows
            .list(&AccessContext::system(), &query)
            .await
            .map_err(store_error)?
            .rows
            .into_rows();
        if found
            .iter()
            .any(|r| r.get("id").and_then(Json::as_str) != except)
        {
            return Err(Error::Conflict(
                "this e-mail address is not available".into(),
            ));
        }
        Ok(())
    }

    /// Makes every user of the OAuth tables that has no row a row whose
    /// `id` is its name (users from before the account type, whose tokens
    /// and owner values name them so), with its stored claims in the
    /// `@claim` fields of those names. Idempotent; returns how many rows
    /// were made.
    pub async fn adopt_users(&self, repo: &dyn gatehouse_auth::AuthRepo) -> Result<usize, Error> {
        let system = AccessContext::system();
        let mut made = 0;
        for user in repo.list_users().await? {
            if self
                .rows()
                .get(&system, &user.username)
                .await
                .map_err(store_error)?
                .is_some()
            {
                continue;
            }
            let mut row = Row::new();
            row.insert("id".into(), json!(user.username));
            row.insert(AccountType::USERNAME.into(), json!(user.username));
            for (name, value) in &user.claims {
                match self.account.claim_field(name) {
                    Some(field) => {
                        row.insert(field.to_string(), value.clone());
                    }
                    None => tracing::warn!(
                        user = %user.username,
                        claim = %name,
                        "a user's claim has no `@claim` field in the account type; its tokens no longer carry it"
                    ),
                }
            }
            match self.rows().insert(&system, row).await {
                Ok(_) => made += 1,
                Err(StoreError::Conflict { message }) => {
                    return Err(Error::Conflict(
                        format!(
                            "the user {:?} cannot become an account row: {message}",
                            user.username
                        )
                        .into(),
                    ));
                }
                Err(e) => {
                    return Err(Error::InvalidInput(
                        format!(
                            "the user {:?} cannot become an account row: {e}",
                            user.username
                        )
                        .into(),
                    ));
                }
            }
        }
        Ok(made)
    }
}

/// Why sign-up cannot create rows of the account type: the required
/// fields it leaves without a value (anything but `username`, `email`
/// and fields the server or a default fills).
pub fn sign_up_blockers(model: &Model) -> Vec<String> {
    let Some(account) = &model.account else {
        return Vec::new();
    };
    model.entities[account.entity.index()]
        .stored_fields()
        .filter(|f| {
            f.required
                && f.generated.is_none()
                && f.default.is_none()
                && f.name != AccountType::USERNAME
                && f.name != AccountType::EMAIL
        })
        .map(|f| f.name.clone())
        .collect()
}

/// The fields `verification = "required"` needs and the account type
/// lacks (all of them without an account type): `email`, where the
/// address lives, and `emailVerified`, without which no account with an
/// address could ever sign in.
pub fn required_verification_blockers(model: &Model) -> Vec<&'static str> {
    let (email, verified) = model
        .account
        .as_ref()
        .map_or((false, false), |a| (a.email, a.email_verified));
    [
        (!email).then_some(AccountType::EMAIL),
        (!verified).then_some(AccountType::EMAIL_VERIFIED),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// A store failure as the authorization server reports it.
fn store_error(e: StoreError) -> Error {
    match e {
        StoreError::Invalid { .. } | StoreError::Forbidden { .. } => {
            Error::InvalidInput(e.to_string().into())
        }
        StoreError::Conflict { message } => Error::Conflict(message.into()),
        StoreError::NotFound => Error::NotFound("no such account".into()),
        other => Error::from(RepoError::new(format!("account rows: {other}"))),
    }
}

fn repo_error(e: StoreError) -> RepoError {
    match e {
        StoreError::Unavailable | StoreError::Timeout => {
            RepoError::unavailable(format!("account rows: {e}"))
        }
        other => RepoError::new(format!("account rows: {other}")),
    }
}

#[async_trait]
impl Accounts for StoreAccounts {
    async fn find_by_username(&self, username: &str) -> Result<Option<AccountProfile>, RepoError> {
        let query = ListQuery {
            filter: Some(Filter::Cmp {
                field: AccountType::USERNAME.into(),
                op: FilterOp::Eq,
                value: json!(username),
            }),
            limit: Some(1),
            ..ListQuery::default()
        };
        Ok(self.profiles(&query).await?.into_iter().next())
    }

    async fn find(&self, sub: &str) -> Result<Option<AccountProfile>, RepoError> {
        let row = self
            .rows()
            .get(&AccessContext::system(), sub)
            .await
            .map_err(repo_error)?;
        Ok(row.and_then(|row| self.profile(&row)))
    }

    async fn list(&self) -> Result<Vec<AccountProfile>, RepoError> {
        let query = ListQuery {
            order: vec![OrderBy {
                field: AccountType::USERNAME.into(),
                desc: false,
            }],
            ..ListQuery::default()
        };
        self.profiles(&query).await
    }

    fn has_email(&self) -> bool {
        self.account.email
    }

    async fn create(
        &self,
        username: &str,
        id: Option<&str>,
        email: Option<&str>,
        claims: &Claims,
        credential: &UserRecord,
    ) -> Result<Option<AccountProfile>, Error> {
        self.tables().await?;
        let txn = self.store.begin_write();
        let Some(profile) = self
            .create_in(
                &txn,
                (username, id),
                email.map(|a| (a, false)),
                claims,
                credential,
            )
            .await?
        else {
            return Ok(None);
        };
        match txn.commit().await {
            Ok(()) => Ok(Some(profile)),
            Err(StoreError::Conflict { .. }) => Ok(None),
            Err(e) => Err(store_error(e)),
        }
    }

    async fn set_claims(&self, sub: &str, claims: &Claims) -> Result<AccountProfile, Error> {
        let patch = self.claim_values(claims)?;
        let row = self
            .rows()
            .update(&AccessContext::system(), sub, patch)
            .await
            .map_err(store_error)?;
        self.profile(&row)
            .ok_or_else(|| Error::from(RepoError::new("an account row has no id or username")))
    }

    async fn delete(&self, sub: &str) -> Result<bool, Error> {
        // The hook deletes the credential and revokes the tokens in the
        // same transaction.
        let deleted = self
            .rows()
            .delete(&AccessContext::system(), sub)
            .await
            .map_err(store_error)?;
        Ok(deleted.is_some())
    }
}

/// Statements that keep credentials and tokens in step with account rows,
/// in the transaction that changes them ([`CommitHook`]).
#[derive(Debug)]
pub struct AccountHook {
    auth: Arc<SqlAuthRepo>,
    account: AccountType,
    /// The account type's name, as change events name it.
    entity: String,
}

impl AccountHook {
    fn claims_changed(&self, old: &Row, new: &Row) -> bool {
        self.account
            .claims
            .iter()
            .any(|c| old.get(&c.field) != new.get(&c.field))
    }
}

impl CommitHook for AccountHook {
    fn statements(&self, change: &ChangeEvent) -> Vec<Built> {
        if change.entity != self.entity {
            return Vec::new();
        }
        let sub = change.id.as_str();
        let disabled = |row: &Option<Row>| {
            row.as_ref()
                .and_then(|r| r.get(AccountType::DISABLED))
                .and_then(Json::as_bool)
                .unwrap_or(false)
        };
        match change.kind {
            ChangeKind::Created => Vec::new(),
            ChangeKind::Deleted => vec![
                self.auth.revoke_user_tokens_statement(sub, true),
                self.auth.delete_user_statement(sub),
                self.auth.delete_identities_statement(sub),
            ],
            ChangeKind::Updated => {
                if disabled(&change.new) && !disabled(&change.old) {
                    return vec![self.auth.revoke_user_tokens_statement(sub, true)];
                }
                match (&change.old, &change.new) {
                    (Some(old), Some(new)) if self.claims_changed(old, new) => {
                        vec![self.auth.revoke_user_tokens_statement(sub, false)]
                    }
                    _ => Vec::new(),
                }
            }
        }
    }
}

/// The e-mail flows' storage ([`gatehouse_auth::MailFlows`]) over the
/// account rows, the OAuth tables and the outbox of one database: a token
/// and its message are written in one transaction of the entity store, and
/// spending a token commits with what it does (a new password, revoked
/// tokens, a verified address).
#[derive(Debug, Clone)]
pub struct StoreFlows {
    accounts: StoreAccounts,
    outbox: Outbox,
}

impl StoreFlows {
    /// The flows over `accounts`, their messages enqueued in `outbox` (in
    /// the same database); `None` when the account type has no `email`.
    pub fn new(accounts: &StoreAccounts, outbox: Outbox) -> Option<StoreFlows> {
        accounts.account.email.then(|| StoreFlows {
            accounts: accounts.clone(),
            outbox,
        })
    }

    async fn tables(&self) -> Result<(), RepoError> {
        self.accounts.tables().await
    }
}

/// Runs `statement` in `txn`, which is rolled back when it fails.
async fn run_in(txn: &WriteTxn, statement: Built) -> Result<u64, Error> {
    match txn.execute(statement).await {
        Ok(n) => Ok(n),
        Err(e) => {
            txn.rollback().await;
            Err(store_error(e))
        }
    }
}

#[async_trait]
impl MailFlows for StoreFlows {
    async fn find_by_email(&self, address: &str) -> Result<Option<AccountProfile>, RepoError> {
        self.accounts.by_email(address).await
    }

    async fn send(&self, token: &FlowToken, mail: &FlowMail) -> Result<bool, RepoError> {
        self.tables().await?;
        let message = Email {
            to: mail.to.clone(),
            subject: mail.subject.clone(),
            text: mail.text.clone(),
            html: None,
        }
        .message();
        let (_, enqueue) = self
            .outbox
            .enqueue_statement(&message)
            .map_err(|e| RepoError::new(format!("enqueueing a flow message: {e}")))?;
        let failed = |e: Error| RepoError::new(format!("writing a flow message: {e}"));
        let auth = &self.accounts.auth;
        let txn = self.accounts.store.begin_write();
        if let Some(lock) = auth.flow_address_lock(&token.address) {
            run_in(&txn, lock).await.map_err(failed)?;
        }
        if run_in(&txn, auth.insert_flow_token_statement(token))
            .await
            .map_err(failed)?
            != 1
        {
            // Over the address's limits: no token, no message.
            txn.rollback().await;
            return Ok(false);
        }
        run_in(&txn, enqueue).await.map_err(failed)?;
        txn.commit().await.map_err(|e| failed(store_error(e)))?;
        self.outbox.wake();
        Ok(true)
    }

    async fn mails_since(
        &self,
        address: &str,
        since: i64,
    ) -> Result<(u64, Option<i64>), RepoError> {
        self.accounts.auth.flow_mails_since(address, since).await
    }

    async fn token(&self, id: &str) -> Result<Option<FlowToken>, RepoError> {
        self.accounts.auth.flow_token(id).await
    }

    async fn token_by_link(&self, link_hash: &str) -> Result<Option<FlowToken>, RepoError> {
        self.accounts.auth.flow_token_by_link(link_hash).await
    }

    async fn latest_token(
        &self,
        sub: &str,
        purpose: FlowPurpose,
    ) -> Result<Option<FlowToken>, RepoError> {
        self.accounts.auth.flow_token_of(sub, purpose).await
    }

    async fn wrong_code(&self, id: &str) -> Result<(), RepoError> {
        self.accounts.auth.flow_wrong_code(id).await
    }

    async fn complete(
        &self,
        token: &FlowToken,
        effect: FlowEffect<'_>,
        now: i64,
    ) -> Result<bool, Error> {
        self.tables().await?;
        let Some(sub) = token.sub.as_deref() else {
            return Ok(false);
        };
        let auth = &self.accounts.auth;
        let txn = self.accounts.store.begin_write();
        if run_in(&txn, auth.use_flow_token_statement(&token.id, now)).await? != 1 {
            txn.rollback().await;
            return Ok(false);
        }
        let rows = txn.entity_at(self.accounts.account.entity);
        let system = AccessContext::system();
        let row = match rows.get(&system, sub).await {
            Ok(Some(row)) => row,
            Ok(None) => {
                txn.rollback().await;
                return Ok(false);
            }
            Err(e) => {
                txn.rollback().await;
                return Err(store_error(e));
            }
        };
        if let FlowEffect::SetPassword { credential } = effect {
            let credential = UserRecord {
                username: sub.to_string(),
                claims: Claims::new(),
                ..credential.clone()
            };
            run_in(&txn, auth.upsert_user_statement(&credential)?).await?;
            run_in(&txn, auth.revoke_user_tokens_statement(sub, true)).await?;
        }
        let mut patch = Row::new();
        if let FlowEffect::ChangeEmail = effect {
            if let Err(e) = self
                .accounts
                .address_free(&rows, &token.address, Some(sub))
                .await
            {
                txn.rollback().await;
                return Err(e);
            }
            patch.insert(AccountType::EMAIL.into(), json!(token.address));
        }
        // The message reached the token's address: when it is (or now
        // becomes) the account's, it is verified.
        let still_its = !patch.is_empty()
            || row
                .get(AccountType::EMAIL)
                .and_then(Json::as_str)
                .is_some_and(|a| a.to_lowercase() == token.address);
        let mut verified = Row::new();
        if self.accounts.account.email_verified && still_its {
            verified.insert(AccountType::EMAIL_VERIFIED.into(), Json::Bool(true));
        }
        if !(patch.is_empty() && verified.is_empty())
            && let Err(e) = rows
                .update_with_server_fields(&system, sub, patch, verified)
                .await
        {
            txn.rollback().await;
            return Err(store_error(e));
        }
        txn.commit().await.map_err(store_error)?;
        Ok(true)
    }

    async fn register(
        &self,
        token: &FlowToken,
        username: &str,
        credential: &UserRecord,
        now: i64,
    ) -> Result<Option<AccountProfile>, Error> {
        self.tables().await?;
        let auth = &self.accounts.auth;
        let txn = self.accounts.store.begin_write();
        if run_in(&txn, auth.use_flow_token_statement(&token.id, now)).await? != 1 {
            txn.rollback().await;
            return Ok(None);
        }
        let Some(profile) = self
            .accounts
            .create_in(
                &txn,
                (username, None),
                Some((&token.address, true)),
                &Claims::new(),
                credential,
            )
            .await?
        else {
            return Err(Error::Conflict(
                "this user name was taken since the sign-up".into(),
            ));
        };
        match txn.commit().await {
            Ok(()) => Ok(Some(profile)),
            Err(StoreError::Conflict { .. }) => Err(Error::Conflict(
                "this user name was taken since the sign-up".into(),
            )),
            Err(e) => Err(store_error(e)),
        }
    }
}

/// The identities of other providers and their flows' rows
/// ([`gatehouse_auth::FederationStore`]) over the account rows and the
/// OAuth tables: an account a provider creates commits with its identity.
#[async_trait]
impl FederationStore for StoreAccounts {
    async fn insert_flow(&self, flow: &ProviderFlow) -> Result<(), RepoError> {
        self.auth.insert_provider_flow(flow).await
    }

    async fn flow(&self, id: &str) -> Result<Option<ProviderFlow>, RepoError> {
        self.auth.provider_flow(id).await
    }

    async fn spend_flow(&self, id: &str, now: i64) -> Result<bool, RepoError> {
        self.auth.spend_provider_flow(id, now).await
    }

    async fn identity(
        &self,
        issuer: &str,
        subject: &str,
    ) -> Result<Option<IdentityRecord>, RepoError> {
        self.auth.identity(issuer, subject).await
    }

    async fn identities(&self, sub: &str) -> Result<Vec<IdentityRecord>, RepoError> {
        self.auth.identities(sub).await
    }

    async fn link(&self, identity: &IdentityRecord) -> Result<bool, RepoError> {
        self.auth.link_identity(identity).await
    }

    async fn unlink(&self, sub: &str, id: &str) -> Result<bool, RepoError> {
        self.auth.unlink_identity(sub, id).await
    }

    async fn find_by_email(&self, address: &str) -> Result<Option<AccountProfile>, RepoError> {
        self.by_email(address).await
    }

    async fn create_linked(
        &self,
        username: &str,
        email: Option<&str>,
        verified: bool,
        credential: &UserRecord,
        identity: &IdentityRecord,
    ) -> Result<Option<AccountProfile>, Error> {
        self.tables().await?;
        let txn = self.store.begin_write();
        let Some(profile) = self
            .create_in(
                &txn,
                (username, None),
                email.map(|a| (a, verified)),
                &Claims::new(),
                credential,
            )
            .await?
        else {
            return Ok(None);
        };
        let identity = IdentityRecord {
            sub: profile.sub.clone(),
            ..identity.clone()
        };
        if run_in(&txn, self.auth.link_identity_statement(&identity)).await? != 1 {
            txn.rollback().await;
            return Err(Error::Conflict(
                "this identity is linked to another account".into(),
            ));
        }
        match txn.commit().await {
            Ok(()) => Ok(Some(profile)),
            Err(StoreError::Conflict { .. }) => Ok(None),
            Err(e) => Err(store_error(e)),
        }
    }
}
