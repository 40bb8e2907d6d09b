#!/usr/bin/env python3
"""External OAuth 2.0 client check for a running gatehouse server (CI).

Uses authlib (a third-party OAuth client) for the password, client
credentials and refresh grants, plain form posts for RFC 8693 token exchange,
and pyjwt to verify every access token against the server's JWKS. Exits 0
when every check passes, 1 on the first failure (with a message), 2 on bad
arguments.

    pip install authlib 'pyjwt[crypto]' requests
    python3 oauth_client.py --base-url http://127.0.0.1:8080 \
        --client-id demo-app --client-secret demo-secret-change-me \
        --username alice --password alice-password \
        --audience https://reports.example

The client must be allowed the password, client_credentials and
refresh_token grants and the scopes `read` and `offline_access`; the
exchanging client (the same one unless --exchange-client-id is given) must be
allowed token exchange, and the --audience value, if given, must be one of its
targets.
"""

import argparse
import base64
import json
import sys

import jwt
import requests
from authlib.integrations.requests_client import OAuth2Session

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
ALGORITHMS = ["EdDSA", "ES256", "RS256"]
TIMEOUT = 10


class CheckFailed(Exception):
    pass


def check(condition, message):
    if not condition:
        raise CheckFailed(message)


def ok(message):
    print(f"ok   {message}")


def unverified_claims(token):
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


class Checker:
    def __init__(self, args):
        self.args = args
        self.base = args.base_url.rstrip("/")
        self.http = requests.Session()
        self.meta = None
        self.issuer = None
        self.jwks = None

    # ----- helpers -----

    def session(self, client_id=None, client_secret=None, scope=None):
        # RFC 6749 §2.3.1: client_secret_basic, as gatehouse requires.
        return OAuth2Session(
            client_id or self.args.client_id,
            client_secret or self.args.client_secret,
            scope=scope,
            token_endpoint_auth_method="client_secret_basic",
        )

    def url(self, path):
        return f"{self.base}{path}"

    def form_post(self, path, data, auth=None):
        if auth is None:
            auth = (self.args.client_id, self.args.client_secret)
        return self.http.post(self.url(path), data=data, auth=auth, timeout=TIMEOUT)

    def verify(self, token, audience=None):
        """Verifies signature, typ, iss, aud and exp against the JWKS."""
        header = jwt.get_unverified_header(token)
        check(header.get("typ") == "at+jwt", f"typ is {header.get('typ')!r}, not at+jwt (RFC 9068)")
        check(header.get("kid"), "no kid in the JWS header")
        key = self.jwks.get_signing_key_from_jwt(token)
        claims = jwt.decode(
            token,
            key.key,
            algorithms=ALGORITHMS,
            audience=audience or self.issuer,
            issuer=self.issuer,
            options={"require": ["iss", "sub", "aud", "exp", "iat", "jti"]},
        )
        check("client_id" in claims, "no client_id claim (RFC 9068 §2.2)")
        check("scope" in claims, "no scope claim")
        return claims

    def expect_error(self, resp, status, code, what):
        check(
            resp.status_code == status,
            f"{what}: expected {status}, got {resp.status_code} {resp.text[:200]}",
        )
        try:
            body = resp.json()
        except ValueError:
            raise CheckFailed(f"{what}: error body is not JSON: {resp.text[:200]}")
        check(body.get("error") == code, f"{what}: expected error {code}, got {body}")
        check("error_description" in body, f"{what}: no error_description in {body}")
        return body

    # ----- checks -----

    def discovery(self):
        r = self.http.get(self.url("/.well-known/oauth-authorization-server"), timeout=TIMEOUT)
        check(r.status_code == 200, f"metadata: HTTP {r.status_code}")
        self.meta = r.json()
        self.issuer = self.meta["issuer"]
        check(
            self.meta["token_endpoint"] == self.url("/oauth/token"),
            f"token_endpoint is {self.meta['token_endpoint']}",
        )
        for grant in ["password", "client_credentials", "refresh_token", TOKEN_EXCHANGE]:
            check(grant in self.meta.get("grant_types_supported", []), f"metadata lacks grant {grant}")
        r = self.http.get(self.meta["jwks_uri"], timeout=TIMEOUT)
        check(r.status_code == 200, f"jwks: HTTP {r.status_code}")
        keys = r.json()["keys"]
        check(keys, "the JWKS is empty")
        for k in keys:
            for private in ("d", "p", "q", "dp", "dq", "qi", "k"):
                check(private not in k, f"JWKS key {k.get('kid')} exposes {private!r}")
        self.jwks = jwt.PyJWKClient(self.meta["jwks_uri"])
        ok(f"metadata and JWKS ({len(keys)} key(s)), issuer {self.issuer}")

    def password_grant(self):
        s = self.session(scope="read offline_access")
        token = s.fetch_token(
            self.meta["token_endpoint"],
            username=self.args.username,
            password=self.args.password,
        )
        check(token.get("token_type", "").lower() == "bearer", f"token_type {token.get('token_type')}")
        check("refresh_token" in token, "no refresh_token from the password grant")
        claims = self.verify(token["access_token"])
        check(claims["sub"] == self.args.username, f"sub is {claims['sub']}")
        check(claims["client_id"] == self.args.client_id, f"client_id is {claims['client_id']}")
        check("offline_access" in claims["scope"].split(), f"scope is {claims['scope']}")
        ok("password grant (authlib), JWT verified against the JWKS")
        return token

    def password_grant_errors(self):
        r = self.form_post(
            "/oauth/token",
            {"grant_type": "password", "username": self.args.username, "password": "wrong-password"},
        )
        body = self.expect_error(r, 400, "invalid_grant", "wrong password")
        check("wrong-password" not in json.dumps(body), "the password is echoed in the error")
        r = self.form_post("/oauth/token", {"grant_type": "client_credentials"}, auth=(self.args.client_id, "wrong"))
        self.expect_error(r, 401, "invalid_client", "wrong client secret")
        check(
            r.headers.get("WWW-Authenticate", "").startswith("Basic"),
            "invalid_client without a WWW-Authenticate: Basic challenge",
        )
        r = self.form_post("/oauth/token", {"scope": "read"})
        self.expect_error(r, 400, "invalid_request", "missing grant_type")
        r = self.http.get(self.url("/oauth/token"), timeout=TIMEOUT)
        check(r.status_code == 405 and r.headers.get("Allow") == "POST", f"GET /oauth/token: {r.status_code}")
        ok("error responses (invalid_grant, invalid_client + challenge, invalid_request, 405)")

    def client_credentials(self):
        s = self.session(scope="read")
        token = s.fetch_token(self.meta["token_endpoint"], grant_type="client_credentials")
        check("refresh_token" not in token, "client_credentials issued a refresh token")
        claims = self.verify(token["access_token"])
        check(claims["sub"] == self.args.client_id, f"sub is {claims['sub']}")
        check(claims["scope"] == "read", f"scope is {claims['scope']}")
        ok("client_credentials grant (authlib)")

    def refresh(self, first):
        s = self.session()
        old = first["refresh_token"]
        token = s.refresh_token(self.meta["token_endpoint"], refresh_token=old)
        check(token.get("refresh_token") and token["refresh_token"] != old, "the refresh token was not rotated")
        self.verify(token["access_token"])
        ok("refresh grant (authlib) rotates the refresh token")
        # /oauth/refresh_token accepts a request without grant_type.
        r = self.form_post("/oauth/refresh_token", {"refresh_token": token["refresh_token"]})
        check(r.status_code == 200, f"/oauth/refresh_token: {r.status_code} {r.text[:200]}")
        check(r.headers.get("Cache-Control") == "no-store", "token response without Cache-Control: no-store")
        latest = r.json()
        self.verify(latest["access_token"])
        # RFC 9700: a spent refresh token revokes its family.
        r = self.form_post("/oauth/token", {"grant_type": "refresh_token", "refresh_token": old})
        self.expect_error(r, 400, "invalid_grant", "reused refresh token")
        r = self.form_post("/oauth/introspect", {"token": latest["access_token"]})
        check(r.status_code == 200 and r.json() == {"active": False}, f"family not revoked: {r.text[:200]}")
        ok("refresh token reuse revokes the family")

    def access_token_endpoint(self):
        r = self.form_post(
            "/oauth/access_token",
            {"grant_type": "password", "username": self.args.username, "password": self.args.password},
        )
        check(r.status_code == 200, f"/oauth/access_token: {r.status_code} {r.text[:200]}")
        check("refresh_token" not in r.json(), "/oauth/access_token issued a refresh token")
        self.verify(r.json()["access_token"])
        ok("/oauth/access_token issues an access token only")

    def token_exchange(self):
        s = self.session(scope="read")
        subject = s.fetch_token(
            self.meta["token_endpoint"], username=self.args.username, password=self.args.password
        )["access_token"]
        ex_id = self.args.exchange_client_id or self.args.client_id
        ex_secret = self.args.exchange_client_secret or self.args.client_secret
        data = {
            "grant_type": TOKEN_EXCHANGE,
            "subject_token": subject,
            "subject_token_type": ACCESS_TOKEN_TYPE,
            "scope": "read",
        }
        if self.args.audience:
            data["audience"] = self.args.audience
        r = self.form_post("/oauth2/token", data, auth=(ex_id, ex_secret))
        check(r.status_code == 200, f"token exchange: {r.status_code} {r.text[:300]}")
        body = r.json()
        check(body.get("issued_token_type") == ACCESS_TOKEN_TYPE, f"issued_token_type {body.get('issued_token_type')}")
        claims = self.verify(body["access_token"], audience=self.args.audience or self.issuer)
        check(claims["sub"] == self.args.username, f"exchanged sub is {claims['sub']}")
        check(claims.get("act", {}).get("sub") == ex_id, f"act is {claims.get('act')}")
        check(claims["exp"] <= unverified_claims(subject)["exp"], "the new token outlives the subject token")
        ok("token exchange (RFC 8693): sub kept, act added, audience honoured")
        # Scope may only narrow.
        data["scope"] = "read write admin"
        r = self.form_post("/oauth2/token", data, auth=(ex_id, ex_secret))
        self.expect_error(r, 400, "invalid_scope", "widening exchange")
        data["scope"] = "read"
        data["audience"] = "https://not-an-allowed-target.invalid"
        r = self.form_post("/oauth2/token", data, auth=(ex_id, ex_secret))
        self.expect_error(r, 400, "invalid_target", "exchange for a foreign audience")
        data.pop("audience")
        data["subject_token"] = "not-a-token"
        r = self.form_post("/oauth2/token", data, auth=(ex_id, ex_secret))
        self.expect_error(r, 400, "invalid_request", "exchange of an invalid subject token")
        ok("token exchange refusals (invalid_scope, invalid_target, invalid_request)")

    def introspect_and_revoke(self):
        s = self.session(scope="read")
        token = s.fetch_token(self.meta["token_endpoint"], grant_type="client_credentials")["access_token"]
        r = self.form_post("/oauth/introspect", {"token": token})
        check(r.status_code == 200 and r.json().get("active") is True, f"introspection: {r.text[:200]}")
        r = self.form_post("/oauth/revoke", {"token": token, "token_type_hint": "access_token"})
        check(r.status_code == 200, f"revocation: {r.status_code} {r.text[:200]}")
        r = self.form_post("/oauth/introspect", {"token": token})
        check(r.json() == {"active": False}, f"revoked token still active: {r.text[:200]}")
        ok("introspection (RFC 7662) and revocation (RFC 7009)")

    def run(self):
        self.discovery()
        first = self.password_grant()
        self.password_grant_errors()
        self.client_credentials()
        self.refresh(first)
        self.access_token_endpoint()
        self.token_exchange()
        self.introspect_and_revoke()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", required=True, help="where the OAuth routes are mounted, e.g. http://127.0.0.1:8080")
    p.add_argument("--client-id", required=True)
    p.add_argument("--client-secret", required=True)
    p.add_argument("--username", required=True)
    p.add_argument("--password", required=True)
    p.add_argument("--exchange-client-id", help="client that exchanges tokens (default: --client-id)")
    p.add_argument("--exchange-client-secret")
    p.add_argument("--audience", help="an allowed exchange target of the exchanging client")
    args = p.parse_args()
    try:
        Checker(args).run()
    except CheckFailed as e:
        print(f"FAIL {e}", file=sys.stderr)
        return 1
    except (requests.RequestException, jwt.PyJWTError, KeyError, ValueError) as e:
        print(f"FAIL {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # authlib raises its own OAuthError family
        print(f"FAIL {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print("all OAuth checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
