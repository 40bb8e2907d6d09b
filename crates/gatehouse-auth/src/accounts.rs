//! Accounts that are rows of the schema (the `@account` type): where the
//! server finds who signs in, the claims its tokens carry, and whether an
//! account may sign in at all. Without an account type the user records
//! of [`crate::AuthRepo`] are the accounts (their name is their `sub`).
//!
//! The credential (password hash, grantable scopes) stays a
//! [`UserRecord`] of the repository, keyed by the account's `sub`; the
//! implementation writes it in the same transaction as the row.

use std::fmt;

use async_trait::async_trait;

use crate::claims::Claims;
use crate::error::{RepoError, Result};
use crate::model::UserRecord;

/// An account as signing in reads it: its row's recognised fields.
#[derive(Debug, Clone, PartialEq)]
pub struct AccountProfile {
    /// The row's id: the `sub` of its tokens.
    pub sub: String,
    /// The sign-in name (`username`).
    pub username: String,
    /// `email`, when the type has it and the row a value.
    pub email: Option<String>,
    /// `emailVerified` (`false` when the type has no such field).
    pub email_verified: bool,
    /// `displayName`, the OpenID `name`.
    pub name: Option<String>,
    /// `disabled`: the account cannot sign in by any grant or scheme.
    pub disabled: bool,
    /// The values of the `@claim` fields that are set, by claim name.
    pub claims: Claims,
}

/// The rows of the account type, read and written for the server.
#[async_trait]
pub trait Accounts: Send + Sync + fmt::Debug {
    /// The account signing in as `username`.
    async fn find_by_username(&self, username: &str) -> Result<Option<AccountProfile>, RepoError>;
    /// The account whose `sub` this is.
    async fn find(&self, sub: &str) -> Result<Option<AccountProfile>, RepoError>;
    /// Every account, by user name.
    async fn list(&self) -> Result<Vec<AccountProfile>, RepoError>;
    /// Whether the account type has an `email` field (sign-up then asks
    /// for an address).
    fn has_email(&self) -> bool;
    /// Creates the account `username` with the row id `id` (a generated
    /// one when `None`), `email` (when given: the type has the field),
    /// `claims` in its `@claim` fields and `credential` (stored under the
    /// new row's id), in one transaction.
    /// `Ok(None)`: the name (or the id) is taken, nothing was written. An address that
    /// another account has, compared without regard to case, is
    /// [`crate::Error::Conflict`] and writes nothing. An unknown claim or a
    /// value the row refuses is `InvalidInput`.
    async fn create(
        &self,
        username: &str,
        id: Option<&str>,
        email: Option<&str>,
        claims: &Claims,
        credential: &UserRecord,
    ) -> Result<Option<AccountProfile>>;
    /// Replaces the values of the account's `@claim` fields (a claim left
    /// out becomes null). `NotFound` without such an account.
    async fn set_claims(&self, sub: &str, claims: &Claims) -> Result<AccountProfile>;
    /// Deletes the account's row and credential in one transaction;
    /// `false` if there was none. Rows that still reference it (`onDelete:
    /// RESTRICT`) make it a `Conflict` naming them.
    async fn delete(&self, sub: &str) -> Result<bool>;
}
