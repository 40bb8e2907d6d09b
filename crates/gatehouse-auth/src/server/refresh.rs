//! RFC 6749 §6: the refresh grant, with rotation and reuse detection
//! (RFC 9700 §4.14.2).

use super::*;

impl AuthServer {
    /// RFC 6749 §6 with rotation (RFC 9700 §4.14.2): the presented refresh
    /// token is spent and replaced. Presenting a spent token again revokes
    /// its whole family, except for the immediate predecessor of the live
    /// token within `refresh_reuse_grace` seconds of its rotation.
    pub async fn refresh_grant(
        &self,
        client: &ClientRecord,
        refresh_token: Option<&str>,
        scope: Option<&str>,
    ) -> Result<TokenResponse> {
        if !client.allows_grant(Grant::RefreshToken) {
            return Err(Error::UnauthorizedClient(
                "this client may not use the refresh_token grant".into(),
            ));
        }
        let Some(value) = opt(refresh_token) else {
            return Err(Error::invalid_request(
                "the refresh_token grant needs `refresh_token`",
            ));
        };
        let invalid = || Error::invalid_grant("the refresh token is invalid, expired or revoked");
        let id = secrets::token_id(value);
        let now = self.now();
        let record = match self.repo.get_token(&id).await? {
            Some(r) if r.kind == TokenKind::Refresh => r,
            _ => return Err(invalid()),
        };
        // RFC 6749 §6: the refresh token must have been issued to this client.
        if record.client_id != client.client_id || record.revoked || record.expires_at <= now {
            return Err(invalid());
        }
        let original = Scopes::from_list(&record.scope);
        let granted = match opt(scope) {
            None => original.clone(),
            Some(text) => {
                let asked = Scopes::parse(text)?;
                if !asked.is_subset(&original) {
                    return Err(Error::invalid_scope(
                        "a refresh may only keep or narrow the original scope",
                    ));
                }
                asked
            }
        };
        // The user is read again: a removed user gets nothing, and the new
        // access token carries the user's claims as they are now (so
        // `user set-claims` takes effect at the next refresh).
        let custom = match &record.username {
            Some(username) => match self.user(username).await? {
                Some(user) => user.claims,
                None => return Err(invalid()),
            },
            None => Claims::new(),
        };
        let next_value = token_string(self.random.as_ref(), 32);
        let next_id = secrets::token_id(&next_value);
        if record.used_at.is_some() {
            self.spent_token_presented(&record, now, &next_id).await?;
        } else if !self.repo.mark_refresh_used(&id, now, &next_id).await? {
            // Lost a race with another use of the same token: that is reuse.
            let current = self.repo.get_token(&id).await?.ok_or_else(invalid)?;
            self.spent_token_presented(&current, now, &next_id).await?;
        }
        // Still here: first use, or the grace case. Rotate.
        self.store_refresh(
            &next_value,
            &record.subject,
            record.username.as_deref(),
            &client.client_id,
            &original,
            record.audience.clone(),
            &record.family_id,
            Some(&id),
            record.idp.as_deref(),
        )
        .await?;
        let lifetime = self.config.access_lifetime(&granted);
        let access = self
            .issue_access(NewAccess {
                jti: self.new_id(),
                subject: &record.subject,
                username: record.username.as_deref(),
                client_id: &client.client_id,
                scope: &granted,
                audience: record.audience.clone(),
                expires_at: now.saturating_add(lifetime),
                family_id: &record.family_id,
                parent_id: Some(&next_id),
                act: None,
                custom: &custom,
                idp: record.idp.as_deref(),
            })
            .await?;
        Ok(TokenResponse {
            access_token: access,
            token_type: "Bearer",
            expires_in: lifetime,
            scope: granted.to_string(),
            refresh_token: Some(next_value),
            issued_token_type: None,
            id_token: None,
        })
    }

    /// A spent refresh token was presented. Within the grace period after its
    /// rotation, if it is the immediate predecessor of the still-unused live
    /// token, that live token is replaced by `next_id` and revoked, and the
    /// caller may rotate again (`Ok`): the client most likely lost the
    /// response. Otherwise the family is revoked (RFC 9700 §4.14.2) and the
    /// grant refused.
    pub(super) async fn spent_token_presented(
        &self,
        record: &TokenRecord,
        now: i64,
        next_id: &str,
    ) -> Result<()> {
        let grace = AuthConfig::secs(self.config.refresh_reuse_grace);
        if grace > 0
            && let (Some(used_at), Some(successor)) = (record.used_at, &record.successor_id)
            && now - used_at <= grace
            && let Some(next) = self.repo.get_token(successor).await?
            // A refresh token spent by an exchange has an access token as
            // successor: presenting it again is always reuse.
            && next.kind == TokenKind::Refresh
            && next.used_at.is_none()
            && !next.revoked
            && self
                .repo
                .replace_successor(&record.id, successor, next_id)
                .await?
        {
            self.repo.revoke_token(successor).await?;
            self.revoked();
            return Ok(());
        }
        let n = self.repo.revoke_family(&record.family_id).await?;
        self.revoked();
        tracing::warn!(
            client_id = %record.client_id,
            revoked = n,
            "spent refresh token presented again: token family revoked"
        );
        Err(Error::invalid_grant(
            "the refresh token is invalid, expired or revoked",
        ))
    }

    /// Revokes a family after a spent refresh token was presented again.
    pub(super) async fn revoke_reused_family(
        &self,
        family_id: &str,
        client_id: &str,
    ) -> Result<()> {
        let n = self.repo.revoke_family(family_id).await?;
        self.revoked();
        tracing::warn!(
            %client_id,
            revoked = n,
            "spent refresh token presented again: token family revoked"
        );
        Ok(())
    }

    pub(super) async fn live_refresh(&self, token: &str, now: i64) -> Result<Option<TokenRecord>> {
        Ok(self
            .repo
            .get_token(&secrets::token_id(token))
            .await?
            .filter(|r| {
                r.kind == TokenKind::Refresh
                    && !r.revoked
                    && r.used_at.is_none()
                    && r.expires_at > now
            }))
    }
}
