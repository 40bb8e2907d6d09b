//! RFC 6749 §4.3: the resource owner password credentials grant.

use super::*;

impl AuthServer {
    /// RFC 6749 §4.3: resource owner password credentials. A refresh token is
    /// issued when `allow_refresh` is set (false on `/oauth/access_token`)
    /// and the client may use the refresh grant.
    ///
    /// With `openid` in the granted scope the response carries an
    /// `id_token`, as the code grant's does.
    ///
    /// A wrong user name and a wrong password are the same `invalid_grant`
    /// and cost the same argon2 verification; failures are throttled per
    /// (user, address `from`) and per address ([`AuthServer::check_user_password`]).
    pub async fn password_grant(
        &self,
        client: &ClientRecord,
        username: Option<&str>,
        password: Option<&str>,
        scope: Option<&str>,
        allow_refresh: bool,
        from: Option<IpAddr>,
    ) -> Result<TokenResponse> {
        if !client.allows_grant(Grant::Password) {
            return Err(Error::UnauthorizedClient(
                "this client may not use the password grant".into(),
            ));
        }
        let (Some(username), Some(password)) = (opt(username), opt(password)) else {
            return Err(Error::invalid_request(
                "the password grant needs `username` and `password`",
            ));
        };
        if let Some(s) = opt(scope) {
            Scopes::parse(s)?;
        }
        let user = self.check_user_password(username, password, from).await?;
        let allowed = crate::oidc::user_scope_ceiling(&client.scopes, &user.scopes);
        let granted = Self::narrow_scope(scope, &allowed)?;
        let with_refresh = allow_refresh && client.allows_grant(Grant::RefreshToken);
        let mut tokens = self
            .issue_pair(
                &user.username,
                Some(&user.username),
                client,
                &granted,
                with_refresh,
                &user.claims,
            )
            .await?;
        if crate::oidc::grants_openid(&tokens.scope) {
            // OpenID Connect Core §3.1.3.3 (and the contract): an ID token
            // whenever `openid` is granted, whatever the grant. The user
            // entered their credentials just now: `auth_time` is now.
            tokens.id_token = Some(
                self.user_id_token(
                    client,
                    &user.username,
                    &tokens.scope,
                    self.now(),
                    None,
                    &tokens.access_token,
                    None,
                )
                .await?,
            );
        }
        Ok(tokens)
    }
}
