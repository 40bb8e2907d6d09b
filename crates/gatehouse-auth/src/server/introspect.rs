//! RFC 7662 token introspection.

use super::*;

impl AuthServer {
    /// RFC 7662 introspection. The caller must have authenticated the
    /// client. Anything not valid right now — unknown, malformed, expired,
    /// revoked, spent, or another client's refresh token — is
    /// `{"active": false}` (§2.2).
    pub async fn introspect(&self, client: &ClientRecord, token: &str) -> Result<Value> {
        let now = self.now();
        let inactive = json!({ "active": false });
        if looks_like_jwt(token) {
            return match self.check_jwt(token, now, false).await {
                Ok((c, username)) => {
                    let mut out = json!({
                        "active": true,
                        "token_type": "Bearer",
                        "scope": c.scope,
                        "client_id": c.client_id,
                        "sub": c.sub,
                        "aud": c.aud,
                        "iss": c.iss,
                        "exp": c.exp,
                        "iat": c.iat,
                        "jti": c.jti,
                    });
                    if let Some(obj) = out.as_object_mut() {
                        let idtyp = c
                            .idtyp
                            .as_deref()
                            .unwrap_or(subject_idtyp(username.as_deref()));
                        obj.insert("idtyp".into(), Value::String(idtyp.to_string()));
                        if let Some(u) = username {
                            obj.insert("username".into(), Value::String(u));
                        }
                        if let Some(act) = &c.act {
                            obj.insert("act".into(), act.clone());
                        }
                        for (name, value) in &c.custom {
                            obj.insert(name.clone(), value.clone());
                        }
                    }
                    Ok(out)
                }
                Err(e @ (Error::Server(_) | Error::Unavailable(_))) => Err(e),
                Err(_) => Ok(inactive),
            };
        }
        // Refresh tokens are only ever shown to the client that holds them.
        match self.live_refresh(token, now).await? {
            Some(r) if r.client_id == client.client_id => {
                let mut out = json!({
                    "active": true,
                    "token_type": "refresh_token",
                    "scope": Scopes::from_list(&r.scope).to_string(),
                    "client_id": r.client_id,
                    "sub": r.subject,
                    "idtyp": subject_idtyp(r.username.as_deref()),
                    "iss": self.config.issuer,
                    "exp": r.expires_at,
                    "iat": r.issued_at,
                });
                if let Some(u) = r.username {
                    // What an access token refreshed from it would carry.
                    let custom = self
                        .user(&u)
                        .await?
                        .map(|user| user.claims)
                        .unwrap_or_default();
                    if let Some(obj) = out.as_object_mut() {
                        obj.insert("username".into(), Value::String(u));
                        for (name, value) in custom {
                            obj.insert(name, value);
                        }
                    }
                }
                Ok(out)
            }
            _ => Ok(inactive),
        }
    }
}
