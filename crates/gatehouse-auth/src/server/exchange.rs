//! RFC 8693 token exchange.

use super::*;

/// Parameters of a token exchange request (RFC 8693 §2.1). `audience` and
/// `resource` may each be given several times.
#[derive(Clone, Default)]
pub struct ExchangeRequest {
    /// `subject_token`.
    pub subject_token: Option<String>,
    /// `subject_token_type`.
    pub subject_token_type: Option<String>,
    /// `actor_token`.
    pub actor_token: Option<String>,
    /// `actor_token_type`.
    pub actor_token_type: Option<String>,
    /// `scope`.
    pub scope: Option<String>,
    /// `audience` values.
    pub audience: Vec<String>,
    /// `resource` values.
    pub resource: Vec<String>,
    /// `requested_token_type`.
    pub requested_token_type: Option<String>,
}

impl fmt::Debug for ExchangeRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExchangeRequest")
            .field(
                "subject_token",
                &self.subject_token.as_ref().map(|_| "<redacted>"),
            )
            .field("subject_token_type", &self.subject_token_type)
            .field(
                "actor_token",
                &self.actor_token.as_ref().map(|_| "<redacted>"),
            )
            .field("actor_token_type", &self.actor_token_type)
            .field("scope", &self.scope)
            .field("audience", &self.audience)
            .field("resource", &self.resource)
            .field("requested_token_type", &self.requested_token_type)
            .finish()
    }
}

/// What a validated subject or actor token stands for.
#[derive(Debug)]
struct TokenFacts {
    /// The token's record id (`jti`, or the refresh token's hash).
    id: String,
    /// Its family: what is exchanged from it joins it, so revoking the
    /// family (or the token, see [`AuthRepo::revoke_token_tree`]) reaches
    /// the exchanged tokens too.
    family_id: String,
    sub: String,
    username: Option<String>,
    scope: Scopes,
    audience: Vec<String>,
    exp: i64,
    act: Option<Value>,
    /// The custom claims the exchanged token keeps: an access token's own,
    /// or for a refresh token the user's current ones.
    claims: Claims,
    /// Set for a refresh token: spent when the exchange succeeds.
    refresh: bool,
}

impl AuthServer {
    /// RFC 8693 token exchange, checking in this order:
    /// the client may exchange (`unauthorized_client`); `subject_token`
    /// and its type are valid (`invalid_request`; a refresh token only from
    /// the client it was issued to, and a spent one revokes its family); the
    /// actor token, if any, is valid (`invalid_request`); the scope is
    /// within the subject token's and the client's (`invalid_scope`); every
    /// audience/resource is an allowed target of the client and never
    /// widens the subject's audience (`invalid_target`); the requested
    /// token type can be issued (`invalid_request`). The new token keeps
    /// `sub`, adds `act`, never outlives the subject token, and joins the
    /// subject's family with the subject as parent, so revoking the subject
    /// revokes it. A refresh token used as subject is spent, as by the
    /// refresh grant.
    pub async fn token_exchange(
        &self,
        client: &ClientRecord,
        req: &ExchangeRequest,
    ) -> Result<TokenResponse> {
        if !client.allows_grant(Grant::TokenExchange) {
            return Err(Error::UnauthorizedClient(
                "this client may not exchange tokens".into(),
            ));
        }
        let now = self.now();

        // RFC 8693 §2.1: subject_token and subject_token_type are REQUIRED.
        let (Some(subject_token), Some(subject_type)) = (
            opt(req.subject_token.as_deref()),
            opt(req.subject_token_type.as_deref()),
        ) else {
            return Err(Error::invalid_request(
                "token exchange needs `subject_token` and `subject_token_type`",
            ));
        };
        // RFC 8693 §2.2.2: an invalid subject token is invalid_request.
        let subject = self
            .token_facts(subject_token, subject_type, client, now, true)
            .await
            .map_err(|e| match e {
                Error::Server(_) | Error::Unavailable(_) => e,
                _ => Error::invalid_request(format!("subject_token: {}", e.description())),
            })?;

        // RFC 8693 §2.1: actor_token_type is REQUIRED with actor_token and
        // MUST NOT be sent without it.
        match (
            opt(req.actor_token.as_deref()),
            opt(req.actor_token_type.as_deref()),
        ) {
            (None, None) => {}
            (Some(actor), Some(actor_type)) => {
                self.token_facts(actor, actor_type, client, now, false)
                    .await
                    .map_err(|e| match e {
                        Error::Server(_) | Error::Unavailable(_) => e,
                        _ => Error::invalid_request(format!("actor_token: {}", e.description())),
                    })?;
            }
            (Some(_), None) => {
                return Err(Error::invalid_request(
                    "`actor_token` needs `actor_token_type`",
                ));
            }
            (None, Some(_)) => {
                return Err(Error::invalid_request(
                    "`actor_token_type` without `actor_token`",
                ));
            }
        }

        // Within the subject token's scope AND the exchanging client's
        // (RFC 8693 §5: the server decides what the client may obtain).
        let client_scopes = Scopes::from_list(&client.scopes);
        let scope = match opt(req.scope.as_deref()) {
            None => {
                // offline_access only when asked for.
                let mut s = subject.scope.intersection(&client_scopes);
                s.0.remove(SCOPE_OFFLINE_ACCESS);
                s
            }
            Some(text) => {
                let asked = Scopes::parse(text)?;
                if !asked.is_subset(&subject.scope) {
                    return Err(Error::invalid_scope(
                        "an exchange may only narrow the subject token's scope",
                    ));
                }
                if !asked.is_subset(&client_scopes) {
                    return Err(Error::invalid_scope(
                        "the requested scope exceeds what this client may be granted",
                    ));
                }
                asked
            }
        };
        if scope.0.is_empty() {
            return Err(Error::invalid_scope(
                "the subject token and this client have no scope in common",
            ));
        }

        // A subject carrying the API's own audience (the default of every
        // grant) may be exchanged for any of the client's targets; one
        // restricted to other audiences never gets a wider one.
        let subject_restricted = !subject.audience.contains(&self.config.issuer);
        let mut targets: Vec<String> = Vec::new();
        for t in req
            .audience
            .iter()
            .chain(req.resource.iter())
            .filter(|t| !t.is_empty())
        {
            let allowed = *t == self.config.issuer || client.audiences.iter().any(|a| a == t);
            if !allowed {
                return Err(Error::InvalidTarget(
                    "the requested audience or resource is not allowed for this client".into(),
                ));
            }
            if subject_restricted && !subject.audience.contains(t) {
                return Err(Error::InvalidTarget(
                    "the requested audience or resource is outside the subject token's audience"
                        .into(),
                ));
            }
            if !targets.contains(t) {
                targets.push(t.clone());
            }
        }
        if targets.is_empty() {
            // No audience asked for: the subject's, never the API's by default.
            targets = subject.audience.clone();
        }

        let issued_type = match opt(req.requested_token_type.as_deref()) {
            None | Some(TOKEN_TYPE_ACCESS) => TOKEN_TYPE_ACCESS,
            Some(TOKEN_TYPE_JWT) => TOKEN_TYPE_JWT,
            Some(_) => {
                return Err(Error::invalid_request(
                    "`requested_token_type` must be the access_token or jwt token type",
                ));
            }
        };

        let jti = self.new_id();
        if subject.refresh {
            // RFC 9700 §4.14.2: single use, as with the refresh grant. A
            // lost race with another use is reuse: the family is revoked.
            if !self.repo.mark_refresh_used(&subject.id, now, &jti).await? {
                self.revoke_reused_family(&subject.family_id, &client.client_id)
                    .await?;
                return Err(Error::invalid_request(
                    "subject_token: the token is invalid, expired or revoked",
                ));
            }
        }

        // RFC 8693 §4.1: the current actor, nesting earlier ones.
        let mut act = serde_json::Map::new();
        act.insert("sub".into(), Value::String(client.client_id.clone()));
        if let Some(prior) = subject.act {
            act.insert("act".into(), prior);
        }
        let exp = now
            .saturating_add(self.config.access_lifetime(&scope))
            .min(subject.exp);
        let access = self
            .issue_access(NewAccess {
                jti,
                subject: &subject.sub,
                username: subject.username.as_deref(),
                client_id: &client.client_id,
                scope: &scope,
                audience: targets,
                expires_at: exp,
                family_id: &subject.family_id,
                parent_id: Some(&subject.id),
                act: Some(Value::Object(act)),
                custom: &subject.claims,
                // An exchanged token states the acting client, not how
                // the user signed in.
                idp: None,
            })
            .await?;
        Ok(TokenResponse {
            access_token: access,
            token_type: "Bearer",
            expires_in: exp - now,
            scope: scope.to_string(),
            refresh_token: None,
            issued_token_type: Some(issued_type),
            id_token: None,
        })
    }

    /// What a subject/actor token of RFC 8693 type `token_type` stands for,
    /// if it is valid now: signature, expiry and revocation for access
    /// tokens and JWTs; for refresh tokens existence, expiry, revocation,
    /// and that it was issued to `client` (a refresh token is bound to its
    /// client, RFC 6749 §6). A spent refresh token presented as the
    /// `subject` is reuse: its family is revoked.
    async fn token_facts(
        &self,
        token: &str,
        token_type: &str,
        client: &ClientRecord,
        now: i64,
        subject: bool,
    ) -> Result<TokenFacts> {
        let invalid = || Error::invalid_token("the token is invalid, expired or revoked");
        match token_type {
            TOKEN_TYPE_ACCESS | TOKEN_TYPE_JWT => {
                let (claims, username) = self.check_jwt(token, now, false).await?;
                // The family is only in the record (read again: the status
                // cache may have answered above).
                let record = self
                    .repo
                    .get_token(&claims.jti)
                    .await?
                    .filter(|r| r.kind == TokenKind::Access && !r.revoked)
                    .ok_or_else(invalid)?;
                Ok(TokenFacts {
                    id: record.id,
                    family_id: record.family_id,
                    sub: claims.sub.clone(),
                    username,
                    scope: Scopes(claims.scopes().map(str::to_string).collect()),
                    audience: claims.aud.0.clone(),
                    exp: claims.exp,
                    act: claims.act.clone(),
                    claims: claims.custom.clone(),
                    refresh: false,
                })
            }
            TOKEN_TYPE_REFRESH => {
                let record = self
                    .repo
                    .get_token(&secrets::token_id(token))
                    .await?
                    .filter(|r| {
                        r.kind == TokenKind::Refresh
                            && !r.revoked
                            && r.expires_at > now
                            // Another client's refresh token reads as an invalid one.
                            && r.client_id == client.client_id
                    })
                    .ok_or_else(invalid)?;
                if record.used_at.is_some() {
                    if subject {
                        self.revoke_reused_family(&record.family_id, &client.client_id)
                            .await?;
                    }
                    return Err(invalid());
                }
                // A refresh token carries no claims: an access token
                // refreshed from it would get the user's current ones, and
                // so does the exchanged token.
                let claims = match &record.username {
                    Some(username) => self.user(username).await?.ok_or_else(invalid)?.claims,
                    None => Claims::new(),
                };
                Ok(TokenFacts {
                    id: record.id,
                    family_id: record.family_id,
                    sub: record.subject,
                    username: record.username,
                    scope: Scopes::from_list(&record.scope),
                    audience: record.audience,
                    exp: record.expires_at,
                    act: None,
                    claims,
                    refresh: subject,
                })
            }
            _ => Err(Error::invalid_request(
                "the token type must be the access_token, refresh_token or jwt token type",
            )),
        }
    }
}
