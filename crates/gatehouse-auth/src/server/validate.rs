//! Validation of our JWT access tokens for resource servers.

use super::*;

impl AuthServer {
    /// Full validation of one of our JWT access tokens at `now`: signature
    /// (reloading keys once if the `kid` is unknown), issuer, expiry,
    /// revocation, and — when `own_audience` — that `aud` includes the issuer.
    pub(super) async fn check_jwt(
        &self,
        token: &str,
        now: i64,
        own_audience: bool,
    ) -> Result<(Arc<AccessClaims>, Option<String>)> {
        let key: [u8; 32] = sha2::Sha256::digest(token.as_bytes()).into();
        let cached = self.verified.get(&key);
        let (claims, status) = match cached {
            Some(v) => (v.claims, v.status),
            None => {
                let c = match jwt::verify_signature(&self.ring, token, now) {
                    Ok(c) => Arc::new(c),
                    Err(e) => {
                        // Another instance may have rotated: look again, but rarely.
                        let last = self.last_key_reload.load(Ordering::SeqCst);
                        if now.saturating_sub(last) < KEY_RELOAD_INTERVAL {
                            return Err(e);
                        }
                        self.reload_keys().await?;
                        Arc::new(jwt::verify_signature(&self.ring, token, now)?)
                    }
                };
                self.verified.insert(
                    key,
                    Verified {
                        claims: c.clone(),
                        status: None,
                    },
                );
                (c, None)
            }
        };
        if claims.iss != self.config.issuer {
            return Err(Error::invalid_token("the token was not issued here"));
        }
        // RFC 7519 §4.1.4: not accepted on or after `exp`.
        if claims.exp <= now {
            return Err(Error::invalid_token("the token has expired"));
        }
        if own_audience && !claims.aud.contains(&self.config.issuer) {
            return Err(Error::invalid_token("the token is not meant for this API"));
        }
        // Read before the store, so a revocation racing with the read leaves
        // the status stale rather than trusted.
        let generation = self.revocations.load(Ordering::SeqCst);
        let ttl = AuthConfig::secs(self.config.token_status_cache_ttl);
        if let Some(s) = status
            && ttl > 0
            && s.generation == generation
            && now >= s.checked_at
            && now - s.checked_at < ttl
        {
            return Ok((claims, s.username));
        }
        let record = match self.repo.get_token(&claims.jti).await? {
            Some(r) if r.kind == TokenKind::Access && !r.revoked => r,
            _ => return Err(Error::invalid_token("the token has been revoked")),
        };
        if ttl > 0 {
            // Only an entry still there is updated: one dropped by a key
            // reload meanwhile stays dropped.
            let _ = self.verified.entry(&key, None, |_, entry| {
                entry.status = Some(LiveStatus {
                    checked_at: now,
                    generation,
                    username: record.username.clone(),
                });
                EntryAction::Retain(())
            });
        }
        Ok((claims, record.username))
    }

    /// For resource servers: validates a bearer access token at `now`
    /// (signature with `kid` lookup, issuer, expiry, revocation, and that
    /// `aud` includes this API's own audience, the issuer). Errors are
    /// [`Error::InvalidToken`] (RFC 6750 §3.1) or [`Error::Server`].
    pub async fn validate_access_token(&self, token: &str, now: i64) -> Result<AccessClaims> {
        let (claims, _) = self.check_jwt(token, now, true).await?;
        Ok(Arc::unwrap_or_clone(claims))
    }

    /// For resource servers: who a bearer access token acts for, validated
    /// as [`AuthServer::validate_access_token`] does. Copies only what a
    /// [`Principal`] holds out of the cached claims.
    pub async fn access_principal(&self, token: &str, now: i64) -> Result<Principal> {
        let (claims, username) = self.check_jwt(token, now, true).await?;
        Ok(Principal::of_access_token(AccessTokenFacts {
            sub: Some(&claims.sub),
            client_id: Some(&claims.client_id),
            scope: &claims.scope,
            exp: Some(claims.exp),
            jti: Some(&claims.jti),
            idtyp: claims.idtyp.as_deref(),
            username: username.as_deref(),
            custom: claims.custom.clone(),
        }))
    }
}
