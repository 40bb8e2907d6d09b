#!/usr/bin/env python3
"""External check of the authorization code flow with PKCE (CI).

authlib's OAuth2Session (a third-party OAuth client) makes the
authorization request with an S256 code challenge; the sign-in page is
driven as a browser without JavaScript would (fetch the page, read its
hidden fields, keep its cookie, post the form, approve the consent page
when one comes); authlib then redeems the code for tokens, which call
/graphql. The request asks for `openid` with a nonce: the ID token is
verified by PyJWT against the discovered JWKS with RS256 alone, the
algorithm a client that registered none gets (OpenID Connect Dynamic
Client Registration §2). Exits 0 when every check passes, 1 on the first
failure.

    pip install authlib requests 'PyJWT[crypto]'
    python3 code_flow_client.py --base-url http://127.0.0.1:8080 \
        --client-id demo-spa --redirect-uri http://127.0.0.1/callback \
        --username alice --password alice-password

The client must be public, allowed the authorization_code and
refresh_token grants and the scopes `openid` and `read`, with no
`id_token_signed_response_alg` and the redirect URI
registered (a loopback one: it is never fetched).
"""

import argparse
import sys
from html.parser import HTMLParser
from urllib.parse import parse_qs, urlsplit

import jwt
import requests
from authlib.common.security import generate_token
from authlib.integrations.requests_client import OAuth2Session

TIMEOUT = 10


class CheckFailed(Exception):
    pass


def check(condition, message):
    if not condition:
        raise CheckFailed(message)


def ok(message):
    print(f"ok   {message}")


class HiddenFields(HTMLParser):
    """The hidden inputs of a page, as a browser would submit them."""

    def __init__(self):
        super().__init__()
        self.fields = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "input" and a.get("type") == "hidden" and "name" in a:
            self.fields[a["name"]] = a.get("value", "")


def hidden_fields(html):
    p = HiddenFields()
    p.feed(html)
    return p.fields


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--client-id", required=True)
    ap.add_argument("--redirect-uri", required=True)
    ap.add_argument("--username", required=True)
    ap.add_argument("--password", required=True)
    args = ap.parse_args()
    base = args.base_url.rstrip("/")

    meta = requests.get(f"{base}/.well-known/openid-configuration", timeout=TIMEOUT).json()
    check("RS256" in meta["id_token_signing_alg_values_supported"], "discovery lists RS256")
    check("S256" in meta["code_challenge_methods_supported"], "S256 advertised")
    check("none" in meta["token_endpoint_auth_methods_supported"], "public clients advertised")
    check(meta["authorization_response_iss_parameter_supported"] is True, "RFC 9207 advertised")
    ok("metadata advertises the code flow")

    client = OAuth2Session(
        client_id=args.client_id,
        redirect_uri=args.redirect_uri,
        scope="openid read",
        code_challenge_method="S256",
        token_endpoint_auth_method="none",
    )
    verifier = generate_token(64)
    nonce = generate_token(24)
    url, state = client.create_authorization_url(
        meta["authorization_endpoint"], code_verifier=verifier, nonce=nonce
    )
    check("code_challenge=" in url and "code_challenge_method=S256" in url, "authlib sent PKCE")

    browser = requests.Session()
    page = browser.get(url, timeout=TIMEOUT)
    check(page.status_code == 200, f"sign-in page: {page.status_code} {page.text[:200]}")
    check(page.headers.get("x-frame-options") == "DENY", "sign-in page refuses framing")
    fields = hidden_fields(page.text)
    check(fields.get("csrf"), "sign-in page carries a CSRF field")
    check(fields.get("state") == state, "state carried in the form")

    # Without the form's cookie (another site posting it): refused.
    forged = requests.post(
        f"{base}/oauth/authorize",
        data={**fields, "action": "sign_in", "username": args.username, "password": args.password},
        allow_redirects=False,
        timeout=TIMEOUT,
    )
    check(forged.status_code == 403, f"forged post: {forged.status_code}")
    ok("a post without the CSRF cookie is refused")

    resp = browser.post(
        f"{base}/oauth/authorize",
        data={**fields, "action": "sign_in", "username": args.username, "password": args.password},
        allow_redirects=False,
        timeout=TIMEOUT,
    )
    if resp.status_code == 200 and "ticket" in hidden_fields(resp.text):
        ok("consent page shown to a third-party client")
        resp = browser.post(
            f"{base}/oauth/authorize",
            data={**hidden_fields(resp.text), "action": "consent"},
            allow_redirects=False,
            timeout=TIMEOUT,
        )
    check(resp.status_code == 302, f"sign-in answered {resp.status_code}: {resp.text[:200]}")
    location = resp.headers["location"]
    check(location.startswith(args.redirect_uri), f"redirected to {location}")
    back = parse_qs(urlsplit(location).query)
    check(back.get("iss") == [meta["issuer"]], f"iss in the response: {back.get('iss')}")
    ok("signed in; redirected with code, state and iss")

    token = client.fetch_token(
        meta["token_endpoint"],
        authorization_response=location,
        code_verifier=verifier,
        state=state,
    )
    check(token.get("token_type") == "Bearer", f"token response: {token}")
    check("read" in token.get("scope", "").split(), "read granted")
    ok("authlib redeemed the code with the PKCE verifier")

    id_token = token.get("id_token")
    check(id_token, f"no id_token for the openid scope: {token}")
    check(jwt.get_unverified_header(id_token).get("alg") == "RS256", "the ID token is RS256")
    key = jwt.PyJWKClient(meta["jwks_uri"]).get_signing_key_from_jwt(id_token)
    claims = jwt.decode(
        id_token,
        key.key,
        algorithms=["RS256"],
        audience=args.client_id,
        issuer=meta["issuer"],
    )
    check(claims.get("sub") == args.username, f"ID token sub: {claims.get('sub')}")
    check(claims.get("nonce") == nonce, "the ID token repeats the nonce")
    ok("PyJWT verified the RS256 ID token against the JWKS")

    gql = requests.post(
        f"{base}/graphql",
        json={"query": "{ __typename }"},
        headers={"Authorization": f"Bearer {token['access_token']}"},
        timeout=TIMEOUT,
    )
    check(gql.status_code == 200 and gql.json().get("data", {}).get("__typename") == "Query",
          f"/graphql with the token: {gql.status_code} {gql.text[:200]}")
    ok("the access token calls /graphql")

    code = back["code"][0]
    again = requests.post(
        meta["token_endpoint"],
        data={
            "grant_type": "authorization_code",
            "client_id": args.client_id,
            "code": code,
            "redirect_uri": args.redirect_uri,
            "code_verifier": verifier,
        },
        timeout=TIMEOUT,
    )
    check(again.status_code == 400 and again.json().get("error") == "invalid_grant", "a code works once")
    gql = requests.post(
        f"{base}/graphql",
        json={"query": "{ __typename }"},
        headers={"Authorization": f"Bearer {token['access_token']}"},
        timeout=TIMEOUT,
    )
    check(gql.status_code == 401, f"replaying the code revoked its token: {gql.status_code}")
    ok("a replayed code is refused and revokes what it issued")


if __name__ == "__main__":
    try:
        main()
    except CheckFailed as e:
        print(f"FAIL {e}")
        sys.exit(1)
