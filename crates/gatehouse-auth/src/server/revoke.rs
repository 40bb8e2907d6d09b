//! RFC 7009 token revocation.

use super::*;

impl AuthServer {
    /// RFC 7009 revocation by the authenticated `client`. Revoking a refresh
    /// token revokes its family, access tokens included. Unknown or invalid
    /// tokens succeed silently (§2.2); another client's token is
    /// `unauthorized_client` (§2.1). `token_type_hint` is only a hint: both
    /// kinds are searched regardless (§2.1).
    pub async fn revoke(&self, client: &ClientRecord, token: &str) -> Result<()> {
        let now = self.now();
        if looks_like_jwt(token) {
            // Expired or not, a token with a good signature can be revoked.
            let Ok(claims) = jwt::verify_signature(&self.ring, token, now) else {
                return Ok(());
            };
            let Some(record) = self.repo.get_token(&claims.jti).await? else {
                return Ok(());
            };
            if record.client_id != client.client_id {
                return Err(Error::UnauthorizedClient(
                    "the token was issued to another client".into(),
                ));
            }
            // With every token exchanged from it (directly or not).
            self.repo
                .revoke_token_tree(&record.id, &record.family_id)
                .await?;
            self.revoked();
            return Ok(());
        }
        let Some(record) = self.repo.get_token(&secrets::token_id(token)).await? else {
            return Ok(());
        };
        if record.kind != TokenKind::Refresh {
            return Ok(());
        }
        if record.client_id != client.client_id {
            return Err(Error::UnauthorizedClient(
                "the token was issued to another client".into(),
            ));
        }
        self.repo.revoke_family(&record.family_id).await?;
        self.revoked();
        Ok(())
    }
}
