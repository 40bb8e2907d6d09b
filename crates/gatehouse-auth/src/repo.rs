//! Persistence of clients, users, signing keys and token records.
//!
//! [`AuthRepo`] is small and made of plain records so that a SQL
//! implementation (`gatehouse-auth-store`) is a table per record type and one
//! statement per method. [`MemoryRepo`] is the reference implementation used
//! by tests and single-process demos.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use crate::error::RepoError;
use crate::model::{
    ClientRecord, CodeRecord, ConsumerRecord, IdentityKind, KeyRecord, NameTaken, NewIdentity,
    OAuth1TokenKind, OAuth1TokenRecord, TokenKind, TokenRecord, UserRecord,
};

/// Storage behind the authorization server. All times are seconds since the
/// Unix epoch.
///
/// Implementations must make [`AuthRepo::mark_refresh_used`] atomic (a
/// compare-and-set): it is what makes refresh tokens single-use when two
/// requests race, on one instance or many.
#[async_trait]
pub trait AuthRepo: Send + Sync + fmt::Debug {
    /// Registers a new user, client or consumer, unless its name is
    /// already taken by a user, a client or a consumer (they share one
    /// namespace: see [`IdentityKind`]), or was retired by the removal of
    /// one, compared without regard to ASCII case ([`crate::name_key`]).
    /// Atomic, across instances too: of two registrations of one name
    /// racing, one wins. `Ok(Some(taken))`: who holds the name; nothing
    /// was written.
    async fn register(&self, identity: NewIdentity<'_>) -> Result<Option<NameTaken>, RepoError>;

    /// The client with this id.
    async fn get_client(&self, client_id: &str) -> Result<Option<ClientRecord>, RepoError>;
    /// Creates or replaces the client with `client.client_id`.
    async fn upsert_client(&self, client: &ClientRecord) -> Result<(), RepoError>;
    /// Every client, ordered by id.
    async fn list_clients(&self) -> Result<Vec<ClientRecord>, RepoError>;
    /// Deletes a client and retires its name (a later
    /// [`AuthRepo::register`] of it is refused), in one transaction;
    /// `false` if there was none.
    async fn delete_client(&self, client_id: &str) -> Result<bool, RepoError>;

    /// The user with this name.
    async fn find_user(&self, username: &str) -> Result<Option<UserRecord>, RepoError>;
    /// Creates or replaces the user with `user.username`.
    async fn upsert_user(&self, user: &UserRecord) -> Result<(), RepoError>;
    /// Every user, ordered by name.
    async fn list_users(&self) -> Result<Vec<UserRecord>, RepoError>;
    /// Deletes a user and retires its name (a later [`AuthRepo::register`]
    /// of it is refused), in one transaction; `false` if there was none.
    async fn delete_user(&self, username: &str) -> Result<bool, RepoError>;

    /// Every stored signing key (current and retired-but-published).
    async fn load_keys(&self) -> Result<Vec<KeyRecord>, RepoError>;
    /// Stores a new signing key.
    async fn insert_key(&self, key: &KeyRecord) -> Result<(), RepoError>;
    /// Marks a key as no longer signing (`retired_at`) and sets until when
    /// it stays published (`publish_until`). Unknown kids are ignored.
    async fn retire_key(
        &self,
        kid: &str,
        retired_at: i64,
        publish_until: i64,
    ) -> Result<(), RepoError>;

    /// Stores a new token record. Ids are unique.
    async fn insert_token(&self, token: &TokenRecord) -> Result<(), RepoError>;
    /// The token record with this id.
    async fn get_token(&self, id: &str) -> Result<Option<TokenRecord>, RepoError>;
    /// Marks one token revoked; `false` if there was none.
    async fn revoke_token(&self, id: &str) -> Result<bool, RepoError>;
    /// Marks every token of a family revoked; returns how many changed.
    async fn revoke_family(&self, family_id: &str) -> Result<u64, RepoError>;
    /// Marks the token `id` revoked together with every token descending
    /// from it through `parent_id` (tokens exchanged from it, and from
    /// those, RFC 8693); descendants always share its `family_id`, which
    /// bounds the search. Returns how many changed.
    /// SQL: a recursive CTE over `parent_id` within `family_id`.
    async fn revoke_token_tree(&self, id: &str, family_id: &str) -> Result<u64, RepoError>;
    /// Marks every token issued to `client_id` revoked (the client was
    /// removed); returns how many changed.
    async fn revoke_client_tokens(&self, client_id: &str) -> Result<u64, RepoError>;
    /// Marks every token whose `username` is `username` revoked (the user
    /// was removed); returns how many changed.
    async fn revoke_user_tokens(&self, username: &str) -> Result<u64, RepoError>;
    /// Atomically marks an unused refresh token as used at `used_at`,
    /// replaced by `successor_id`. Returns `false` (and changes nothing) if
    /// it was already used, revoked, or does not exist.
    /// SQL: `UPDATE ... SET used_at=?, successor_id=? WHERE id=? AND
    /// kind='refresh' AND used_at IS NULL AND NOT revoked`.
    async fn mark_refresh_used(
        &self,
        id: &str,
        used_at: i64,
        successor_id: &str,
    ) -> Result<bool, RepoError>;
    /// Atomically replaces the successor of a used refresh token, if it is
    /// still `expected` (the grace-period retry of RFC 9700 §4.14.2). Returns
    /// `false` (and changes nothing) otherwise.
    /// SQL: `UPDATE ... SET successor_id=? WHERE id=? AND successor_id=?`.
    async fn replace_successor(
        &self,
        id: &str,
        expected: &str,
        successor_id: &str,
    ) -> Result<bool, RepoError>;
    /// Deletes token records that expired at or before `now`, and keys whose
    /// `publish_until` is at or before `now`. Returns how many rows went.
    async fn purge_expired(&self, now: i64) -> Result<u64, RepoError>;

    // ----- authorization codes -----

    /// Stores a new authorization code. Ids are unique.
    async fn insert_code(&self, code: &CodeRecord) -> Result<(), RepoError>;
    /// The authorization code with this id.
    async fn get_code(&self, id: &str) -> Result<Option<CodeRecord>, RepoError>;
    /// Atomically marks an unused code used at `now`. Returns `false` (and
    /// changes nothing) if it was already used or does not exist: of two
    /// redemptions racing, on one instance or many, one wins.
    /// SQL: `UPDATE ... SET used_at=? WHERE id=? AND used_at IS NULL`.
    async fn use_code(&self, id: &str, now: i64) -> Result<bool, RepoError>;
    /// Deletes codes that expired at or before `before`. Returns how many went.
    async fn purge_codes(&self, before: i64) -> Result<u64, RepoError>;

    // ----- OAuth 1.0 -----

    /// The OAuth 1.0 consumer with this key.
    async fn get_consumer(&self, key: &str) -> Result<Option<ConsumerRecord>, RepoError>;
    /// Creates or replaces the consumer with `consumer.key`.
    async fn upsert_consumer(&self, consumer: &ConsumerRecord) -> Result<(), RepoError>;
    /// Every consumer, ordered by key.
    async fn list_consumers(&self) -> Result<Vec<ConsumerRecord>, RepoError>;
    /// Deletes a consumer and every OAuth 1.0 token issued to it and
    /// retires its key (a later [`AuthRepo::register`] of it is refused);
    /// `false` if there was no such consumer.
    async fn delete_consumer(&self, key: &str) -> Result<bool, RepoError>;
    /// Stores a new OAuth 1.0 token. Ids are unique.
    async fn insert_oauth1_token(&self, token: &OAuth1TokenRecord) -> Result<(), RepoError>;
    /// The OAuth 1.0 token with this id.
    async fn get_oauth1_token(&self, id: &str) -> Result<Option<OAuth1TokenRecord>, RepoError>;
    /// Atomically records the owner's approval of a request token that is
    /// unapproved, unused and unexpired at `now`. Returns `false` (and
    /// changes nothing) otherwise.
    async fn approve_request_token(
        &self,
        id: &str,
        username: &str,
        verifier_hash: &str,
        scopes: &[String],
        now: i64,
    ) -> Result<bool, RepoError>;
    /// Atomically marks an approved, unused request token used at `now`
    /// (the compare-and-set that makes it single-use). Returns `false` (and
    /// changes nothing) if it was already used or does not exist.
    async fn use_request_token(&self, id: &str, now: i64) -> Result<bool, RepoError>;
    /// Records a nonce of `consumer_key`, valid until `expires_at`. Returns
    /// `false` if the same nonce is already recorded and not yet expired at
    /// `now`. Must be atomic across instances (a unique key, not memory).
    async fn insert_nonce(
        &self,
        consumer_key: &str,
        nonce: &str,
        expires_at: i64,
        now: i64,
    ) -> Result<bool, RepoError>;
    /// Deletes OAuth 1.0 tokens and nonces that expired at or before `now`.
    async fn purge_oauth1(&self, now: i64) -> Result<u64, RepoError>;
}

#[derive(Debug, Default)]
struct Inner {
    clients: HashMap<String, ClientRecord>,
    users: HashMap<String, UserRecord>,
    keys: Vec<KeyRecord>,
    tokens: HashMap<String, TokenRecord>,
    /// family id -> token ids, so family revocation does not scan everything.
    families: HashMap<String, Vec<String>>,
    consumers: HashMap<String, ConsumerRecord>,
    oauth1_tokens: HashMap<String, OAuth1TokenRecord>,
    /// (consumer key, nonce) -> expiry.
    nonces: HashMap<(String, String), i64>,
    codes: HashMap<String, CodeRecord>,
    /// Names of removed identities, by [`crate::name_key`]: (kind, name).
    retired: HashMap<String, (IdentityKind, String)>,
}

impl Inner {
    /// Who holds `name` without regard to ASCII case: [`NameTaken`]'s order.
    fn holder(&self, name: &str) -> Option<NameTaken> {
        let key = crate::name_key(name);
        let first = |kind, names: &mut dyn Iterator<Item = &String>| {
            names
                .filter(|n| crate::name_key(n) == key)
                .min()
                .map(|n| NameTaken::Live(kind, n.clone()))
        };
        first(IdentityKind::User, &mut self.users.keys())
            .or_else(|| first(IdentityKind::Client, &mut self.clients.keys()))
            .or_else(|| first(IdentityKind::Consumer, &mut self.consumers.keys()))
            .or_else(|| {
                self.retired
                    .get(&key)
                    .map(|(kind, n)| NameTaken::Retired(*kind, n.clone()))
            })
    }

    fn retire(&mut self, kind: IdentityKind, name: &str) {
        self.retired
            .entry(crate::name_key(name))
            .or_insert_with(|| (kind, name.to_string()));
    }
}

/// An [`AuthRepo`] in memory: for tests and one-process demos. Nothing survives
/// a restart.
#[derive(Debug, Default)]
pub struct MemoryRepo {
    inner: Mutex<Inner>,
}

impl MemoryRepo {
    /// An empty repository.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a record half-written
        // (every mutation is a single insert/assign), so poison is harmless.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many token records are stored (for tests of purging).
    pub fn token_count(&self) -> usize {
        self.lock().tokens.len()
    }
}

#[async_trait]
impl AuthRepo for MemoryRepo {
    async fn register(&self, identity: NewIdentity<'_>) -> Result<Option<NameTaken>, RepoError> {
        let mut inner = self.lock();
        if let Some(taken) = inner.holder(identity.name()) {
            return Ok(Some(taken));
        }
        match identity {
            NewIdentity::User(u) => {
                inner.users.insert(u.username.clone(), u.clone());
            }
            NewIdentity::Client(c) => {
                inner.clients.insert(c.client_id.clone(), c.clone());
            }
            NewIdentity::Consumer(c) => {
                inner.consumers.insert(c.key.clone(), c.clone());
            }
        }
        Ok(None)
    }

    async fn get_client(&self, client_id: &str) -> Result<Option<ClientRecord>, RepoError> {
        Ok(self.lock().clients.get(client_id).cloned())
    }

    async fn upsert_client(&self, client: &ClientRecord) -> Result<(), RepoError> {
        self.lock()
            .clients
            .insert(client.client_id.clone(), client.clone());
        Ok(())
    }

    async fn list_clients(&self) -> Result<Vec<ClientRecord>, RepoError> {
        let mut all: Vec<_> = self.lock().clients.values().cloned().collect();
        all.sort_by(|a, b| a.client_id.cmp(&b.client_id));
        Ok(all)
    }

    async fn delete_client(&self, client_id: &str) -> Result<bool, RepoError> {
        let mut inner = self.lock();
        let found = inner.clients.remove(client_id).is_some();
        if found {
            inner.retire(IdentityKind::Client, client_id);
        }
        Ok(found)
    }

    async fn find_user(&self, username: &str) -> Result<Option<UserRecord>, RepoError> {
        Ok(self.lock().users.get(username).cloned())
    }

    async fn upsert_user(&self, user: &UserRecord) -> Result<(), RepoError> {
        self.lock()
            .users
            .insert(user.username.clone(), user.clone());
        Ok(())
    }

    async fn list_users(&self) -> Result<Vec<UserRecord>, RepoError> {
        let mut all: Vec<_> = self.lock().users.values().cloned().collect();
        all.sort_by(|a, b| a.username.cmp(&b.username));
        Ok(all)
    }

    async fn delete_user(&self, username: &str) -> Result<bool, RepoError> {
        let mut inner = self.lock();
        let found = inner.users.remove(username).is_some();
        if found {
            inner.retire(IdentityKind::User, username);
        }
        Ok(found)
    }

    async fn load_keys(&self) -> Result<Vec<KeyRecord>, RepoError> {
        Ok(self.lock().keys.clone())
    }

    async fn insert_key(&self, key: &KeyRecord) -> Result<(), RepoError> {
        let mut inner = self.lock();
        if inner.keys.iter().any(|k| k.kid == key.kid) {
            return Err(RepoError::new(format!("duplicate key id {}", key.kid)));
        }
        inner.keys.push(key.clone());
        Ok(())
    }

    async fn retire_key(
        &self,
        kid: &str,
        retired_at: i64,
        publish_until: i64,
    ) -> Result<(), RepoError> {
        for k in self.lock().keys.iter_mut().filter(|k| k.kid == kid) {
            k.retired_at = Some(retired_at);
            k.publish_until = Some(publish_until);
        }
        Ok(())
    }

    async fn insert_token(&self, token: &TokenRecord) -> Result<(), RepoError> {
        let mut inner = self.lock();
        if inner.tokens.contains_key(&token.id) {
            return Err(RepoError::new("duplicate token id"));
        }
        inner
            .families
            .entry(token.family_id.clone())
            .or_default()
            .push(token.id.clone());
        inner.tokens.insert(token.id.clone(), token.clone());
        Ok(())
    }

    async fn get_token(&self, id: &str) -> Result<Option<TokenRecord>, RepoError> {
        Ok(self.lock().tokens.get(id).cloned())
    }

    async fn revoke_token(&self, id: &str) -> Result<bool, RepoError> {
        Ok(match self.lock().tokens.get_mut(id) {
            Some(t) => {
                t.revoked = true;
                true
            }
            None => false,
        })
    }

    async fn revoke_family(&self, family_id: &str) -> Result<u64, RepoError> {
        let mut inner = self.lock();
        let ids = inner.families.get(family_id).cloned().unwrap_or_default();
        let mut n = 0;
        for id in ids {
            if let Some(t) = inner.tokens.get_mut(&id)
                && !t.revoked
            {
                t.revoked = true;
                n += 1;
            }
        }
        Ok(n)
    }

    async fn revoke_token_tree(&self, id: &str, family_id: &str) -> Result<u64, RepoError> {
        let mut inner = self.lock();
        let family = inner.families.get(family_id).cloned().unwrap_or_default();
        let mut tree = vec![id.to_string()];
        let mut i = 0;
        while let Some(parent) = tree.get(i).cloned() {
            for child in &family {
                if !tree.contains(child)
                    && inner
                        .tokens
                        .get(child)
                        .is_some_and(|t| t.parent_id.as_deref() == Some(parent.as_str()))
                {
                    tree.push(child.clone());
                }
            }
            i += 1;
        }
        let mut n = 0;
        for id in tree {
            if let Some(t) = inner.tokens.get_mut(&id)
                && !t.revoked
            {
                t.revoked = true;
                n += 1;
            }
        }
        Ok(n)
    }

    async fn revoke_client_tokens(&self, client_id: &str) -> Result<u64, RepoError> {
        let mut n = 0;
        for t in self.lock().tokens.values_mut() {
            if t.client_id == client_id && !t.revoked {
                t.revoked = true;
                n += 1;
            }
        }
        Ok(n)
    }

    async fn revoke_user_tokens(&self, username: &str) -> Result<u64, RepoError> {
        let mut n = 0;
        for t in self.lock().tokens.values_mut() {
            if t.username.as_deref() == Some(username) && !t.revoked {
                t.revoked = true;
                n += 1;
            }
        }
        Ok(n)
    }

    async fn mark_refresh_used(
        &self,
        id: &str,
        used_at: i64,
        successor_id: &str,
    ) -> Result<bool, RepoError> {
        Ok(match self.lock().tokens.get_mut(id) {
            Some(t) if t.kind == TokenKind::Refresh && t.used_at.is_none() && !t.revoked => {
                t.used_at = Some(used_at);
                t.successor_id = Some(successor_id.to_string());
                true
            }
            _ => false,
        })
    }

    async fn replace_successor(
        &self,
        id: &str,
        expected: &str,
        successor_id: &str,
    ) -> Result<bool, RepoError> {
        Ok(match self.lock().tokens.get_mut(id) {
            Some(t) if t.successor_id.as_deref() == Some(expected) => {
                t.successor_id = Some(successor_id.to_string());
                true
            }
            _ => false,
        })
    }

    async fn purge_expired(&self, now: i64) -> Result<u64, RepoError> {
        let mut inner = self.lock();
        let before = inner.tokens.len() + inner.keys.len();
        inner.tokens.retain(|_, t| t.expires_at > now);
        inner
            .keys
            .retain(|k| k.publish_until.is_none_or(|until| until > now));
        let Inner {
            tokens, families, ..
        } = &mut *inner;
        families.retain(|_, ids| {
            ids.retain(|id| tokens.contains_key(id));
            !ids.is_empty()
        });
        let after = inner.tokens.len() + inner.keys.len();
        Ok((before - after) as u64)
    }

    async fn get_consumer(&self, key: &str) -> Result<Option<ConsumerRecord>, RepoError> {
        Ok(self.lock().consumers.get(key).cloned())
    }

    async fn upsert_consumer(&self, consumer: &ConsumerRecord) -> Result<(), RepoError> {
        self.lock()
            .consumers
            .insert(consumer.key.clone(), consumer.clone());
        Ok(())
    }

    async fn list_consumers(&self) -> Result<Vec<ConsumerRecord>, RepoError> {
        let mut all: Vec<_> = self.lock().consumers.values().cloned().collect();
        all.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(all)
    }

    async fn delete_consumer(&self, key: &str) -> Result<bool, RepoError> {
        let mut inner = self.lock();
        inner.oauth1_tokens.retain(|_, t| t.consumer_key != key);
        let found = inner.consumers.remove(key).is_some();
        if found {
            inner.retire(IdentityKind::Consumer, key);
        }
        Ok(found)
    }

    async fn insert_oauth1_token(&self, token: &OAuth1TokenRecord) -> Result<(), RepoError> {
        let mut inner = self.lock();
        if inner.oauth1_tokens.contains_key(&token.id) {
            return Err(RepoError::new("duplicate token id"));
        }
        inner.oauth1_tokens.insert(token.id.clone(), token.clone());
        Ok(())
    }

    async fn get_oauth1_token(&self, id: &str) -> Result<Option<OAuth1TokenRecord>, RepoError> {
        Ok(self.lock().oauth1_tokens.get(id).cloned())
    }

    async fn approve_request_token(
        &self,
        id: &str,
        username: &str,
        verifier_hash: &str,
        scopes: &[String],
        now: i64,
    ) -> Result<bool, RepoError> {
        Ok(match self.lock().oauth1_tokens.get_mut(id) {
            Some(t)
                if t.kind == OAuth1TokenKind::Request
                    && t.username.is_none()
                    && t.used_at.is_none()
                    && t.expires_at > now =>
            {
                t.username = Some(username.to_string());
                t.verifier_hash = Some(verifier_hash.to_string());
                t.scopes = scopes.to_vec();
                true
            }
            _ => false,
        })
    }

    async fn use_request_token(&self, id: &str, now: i64) -> Result<bool, RepoError> {
        Ok(match self.lock().oauth1_tokens.get_mut(id) {
            Some(t)
                if t.kind == OAuth1TokenKind::Request
                    && t.username.is_some()
                    && t.used_at.is_none() =>
            {
                t.used_at = Some(now);
                true
            }
            _ => false,
        })
    }

    async fn insert_nonce(
        &self,
        consumer_key: &str,
        nonce: &str,
        expires_at: i64,
        now: i64,
    ) -> Result<bool, RepoError> {
        let mut inner = self.lock();
        let key = (consumer_key.to_string(), nonce.to_string());
        match inner.nonces.get(&key) {
            Some(&until) if until > now => Ok(false),
            _ => {
                inner.nonces.insert(key, expires_at);
                Ok(true)
            }
        }
    }

    async fn purge_oauth1(&self, now: i64) -> Result<u64, RepoError> {
        let mut inner = self.lock();
        let before = inner.oauth1_tokens.len() + inner.nonces.len();
        inner.oauth1_tokens.retain(|_, t| t.expires_at > now);
        inner.nonces.retain(|_, until| *until > now);
        let after = inner.oauth1_tokens.len() + inner.nonces.len();
        Ok((before - after) as u64)
    }

    async fn insert_code(&self, code: &CodeRecord) -> Result<(), RepoError> {
        let mut inner = self.lock();
        if inner.codes.contains_key(&code.id) {
            return Err(RepoError::new("duplicate authorization code id"));
        }
        inner.codes.insert(code.id.clone(), code.clone());
        Ok(())
    }

    async fn get_code(&self, id: &str) -> Result<Option<CodeRecord>, RepoError> {
        Ok(self.lock().codes.get(id).cloned())
    }

    async fn use_code(&self, id: &str, now: i64) -> Result<bool, RepoError> {
        let mut inner = self.lock();
        match inner.codes.get_mut(id) {
            Some(c) if c.used_at.is_none() => {
                c.used_at = Some(now);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn purge_codes(&self, before: i64) -> Result<u64, RepoError> {
        let mut inner = self.lock();
        let n = inner.codes.len();
        inner.codes.retain(|_, c| c.expires_at > before);
        Ok((n - inner.codes.len()) as u64)
    }
}
