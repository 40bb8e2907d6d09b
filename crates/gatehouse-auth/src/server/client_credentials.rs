//! RFC 6749 §4.4: the client credentials grant.

use super::*;

impl AuthServer {
    /// RFC 6749 §4.4: client credentials. The subject is the client itself,
    /// with no custom claims (those belong to users); no refresh token
    /// (RFC 6749 §4.4.3).
    pub async fn client_credentials_grant(
        &self,
        client: &ClientRecord,
        scope: Option<&str>,
    ) -> Result<TokenResponse> {
        if !client.allows_grant(Grant::ClientCredentials) {
            return Err(Error::UnauthorizedClient(
                "this client may not use the client_credentials grant".into(),
            ));
        }
        let granted = Self::resolve_scope(scope, &Scopes::from_list(&client.scopes))?;
        self.issue_pair(
            &client.client_id,
            None,
            client,
            &granted,
            false,
            &Claims::new(),
        )
        .await
    }
}
