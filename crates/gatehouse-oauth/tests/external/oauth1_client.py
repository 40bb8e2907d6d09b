#!/usr/bin/env python3
"""External OAuth 1.0 (RFC 5849) check for a running gatehouse server (CI).

Signs every request with oauthlib / requests-oauthlib (a third-party
signer), with HMAC-SHA1 and with PLAINTEXT: request token (POST with the
header, and GET with query parameters as the seed shows), approval by the
user (out of band, and with a callback redirect), access token, a signed GET
on /v1 and a signed POST on /graphql. Then each refusal: wrong secret,
unknown consumer, replayed nonce, stale timestamp, reused verifier, tampered
parameter. Exits 0 when every check passes, 1 on the first failure.

    pip install oauthlib requests-oauthlib requests
    python3 oauth1_client.py --base-url http://127.0.0.1:8080 \
        --consumer-key demo-consumer --consumer-secret demo-consumer-secret \
        --username alice --password alice-password
"""

import argparse
import re
import sys
import time
from urllib.parse import parse_qs, urlparse

import requests
from oauthlib.oauth1 import (
    SIGNATURE_HMAC,
    SIGNATURE_PLAINTEXT,
    SIGNATURE_TYPE_QUERY,
    Client,
)
from requests_oauthlib import OAuth1Session
from requests_oauthlib.oauth1_session import TokenRequestDenied

TIMEOUT = 10

_send = requests.Session.send


def _send_with_retry(self, request, **kwargs):
    """The token endpoints are rate limited per address (20/s, burst 40);
    this script sends bursts, so a 429 is waited out (Retry-After) and the
    same request sent again (a 429 comes before verification: its nonce was
    not recorded)."""
    for _ in range(10):
        r = _send(self, request, **kwargs)
        if r.status_code != 429:
            return r
        time.sleep(float(r.headers.get("retry-after", "1")))
    return r


requests.Session.send = _send_with_retry


class CheckFailed(Exception):
    pass


def check(cond, message):
    if not cond:
        raise CheckFailed(message)


def form(text):
    return {k: v[0] for k, v in parse_qs(text, keep_blank_values=True).items()}


class Flow:
    def __init__(self, args, method):
        self.base = args.base_url.rstrip("/")
        self.key = args.consumer_key
        self.secret = args.consumer_secret
        self.username = args.username
        self.password = args.password
        self.method = method

    def session(self, **kw):
        return OAuth1Session(
            self.key, client_secret=self.secret, signature_method=self.method, **kw
        )

    def request_token(self, callback=None, query=False):
        kw = {"callback_uri": callback} if callback else {}
        if query:
            kw["signature_type"] = SIGNATURE_TYPE_QUERY
        s = self.session(**kw)
        url = f"{self.base}/oauth/requestToken"
        if query:
            # The seed's form: GET with every parameter in the query string.
            r = s.get(url, timeout=TIMEOUT)
            check(r.status_code == 200, f"GET requestToken: {r.status_code} {r.text}")
            check(
                r.headers.get("content-type") == "application/x-www-form-urlencoded"
                and r.headers.get("cache-control") == "no-store",
                f"requestToken headers: {dict(r.headers)}",
            )
            t = form(r.text)
        else:
            t = s.fetch_request_token(url)
        check(t.get("oauth_callback_confirmed") == "true", f"callback not confirmed: {t}")
        return t["oauth_token"], t["oauth_token_secret"]

    def approve(self, token, password=None):
        # As a browser does: the approval page sets the CSRF cookie and
        # carries the field that goes with it.
        browser = requests.Session()
        page = browser.get(
            f"{self.base}/oauth/authorize", params={"oauth_token": token}, timeout=TIMEOUT
        )
        found = re.search(r'name="csrf" value="([^"]*)"', page.text)
        check(found is not None, f"approval page without a CSRF field: {page.status_code}")
        return browser.post(
            f"{self.base}/oauth/authorize",
            data={
                "oauth_token": token,
                "username": self.username,
                "password": password or self.password,
                "csrf": found.group(1),
            },
            allow_redirects=False,
            timeout=TIMEOUT,
        )

    def access_token(self, rt, rt_secret, verifier):
        s = self.session(
            resource_owner_key=rt, resource_owner_secret=rt_secret, verifier=verifier
        )
        t = s.fetch_access_token(f"{self.base}/oauth/access_token")
        return t["oauth_token"], t["oauth_token_secret"]

    def three_legged_oob(self):
        rt, rt_secret = self.request_token()
        page = requests.get(
            f"{self.base}/oauth/authorize", params={"oauth_token": rt}, timeout=TIMEOUT
        )
        check(page.status_code == 200 and "<form" in page.text, "approval page")
        r = self.approve(rt, password="not-the-password")
        check(r.status_code == 401, f"wrong password: {r.status_code}")
        r = self.approve(rt)
        check(r.status_code == 200, f"approval: {r.status_code} {r.text}")
        verifier = form(r.text)["oauth_verifier"]
        at, at_secret = self.access_token(rt, rt_secret, verifier)
        # The verifier (and request token) work once.
        try:
            self.access_token(rt, rt_secret, verifier)
            raise CheckFailed("a reused verifier was accepted")
        except TokenRequestDenied as e:
            check(e.status_code == 401, f"reused verifier: {e.status_code}")
        return at, at_secret

    def three_legged_callback(self):
        rt, rt_secret = self.request_token(
            callback="https://client.example/done?state=xyz", query=True
        )
        r = self.approve(rt)
        check(r.status_code == 302, f"approval with callback: {r.status_code} {r.text}")
        location = r.headers["location"]
        check(location.startswith("https://client.example/done?"), location)
        q = form(urlparse(location).query)
        check(q.get("state") == "xyz" and q.get("oauth_token") == rt, location)
        # requests-oauthlib reads the verifier from the redirect like a web app.
        s = self.session(resource_owner_key=rt, resource_owner_secret=rt_secret)
        s.parse_authorization_response(location)
        t = s.fetch_access_token(f"{self.base}/oauth/access_token")
        return t["oauth_token"], t["oauth_token_secret"]

    def resources(self, at, at_secret):
        s = self.session(resource_owner_key=at, resource_owner_secret=at_secret)
        r = s.get(f"{self.base}/v1/books", params={"page": "1"}, timeout=TIMEOUT)
        check(r.status_code == 200, f"signed GET /v1/books: {r.status_code} {r.text}")
        r = s.post(
            f"{self.base}/graphql",
            json={"query": "{ books { title } }"},
            timeout=TIMEOUT,
        )
        body = r.json()
        check(
            r.status_code == 200 and "errors" not in body,
            f"signed POST /graphql: {r.status_code} {body}",
        )
        # The consumer alone (two-legged) acts as itself.
        r = self.session().get(f"{self.base}/v1/books", timeout=TIMEOUT)
        check(r.status_code == 200, f"consumer-only GET /v1/books: {r.status_code}")

    def refusals(self):
        url = f"{self.base}/oauth/requestToken"
        # Wrong secret.
        s = OAuth1Session(self.key, client_secret="wrong", signature_method=self.method)
        try:
            s.fetch_request_token(url)
            raise CheckFailed("a wrong consumer secret was accepted")
        except TokenRequestDenied as e:
            check(e.status_code == 401, f"wrong secret: {e.status_code}")
        # Unknown consumer.
        s = OAuth1Session("no-such-consumer", client_secret="x", signature_method=self.method)
        try:
            s.fetch_request_token(url)
            raise CheckFailed("an unknown consumer was accepted")
        except TokenRequestDenied as e:
            check(e.status_code == 401, f"unknown consumer: {e.status_code}")
        # Replayed nonce: the very same signed request twice.
        c = Client(self.key, client_secret=self.secret, signature_method=self.method)
        uri, headers, _ = c.sign(url, http_method="POST")
        first = requests.post(uri, headers=headers, timeout=TIMEOUT)
        check(first.status_code == 200, f"signed once: {first.status_code} {first.text}")
        again = requests.post(uri, headers=headers, timeout=TIMEOUT)
        check(again.status_code == 401, f"replayed nonce: {again.status_code}")
        check(
            again.headers.get("www-authenticate", "").startswith("OAuth"),
            "challenge on a replay",
        )
        # Stale timestamp.
        c = Client(
            self.key,
            client_secret=self.secret,
            signature_method=self.method,
            timestamp=str(int(time.time()) - 3600),
        )
        uri, headers, _ = c.sign(url, http_method="POST")
        r = requests.post(uri, headers=headers, timeout=TIMEOUT)
        check(r.status_code == 401, f"stale timestamp: {r.status_code}")
        # Tampered parameter: signed page=1, sent page=2. (PLAINTEXT signs
        # no parameters, by design: RFC 5849 §3.4.4 relies on TLS.)
        if self.method == SIGNATURE_HMAC:
            c = Client(self.key, client_secret=self.secret, signature_method=self.method)
            uri, headers, _ = c.sign(f"{self.base}/v1/books?page=1", http_method="GET")
            tampered = uri.replace("page=1", "page=2")
            r = requests.get(tampered, headers=headers, timeout=TIMEOUT)
            check(r.status_code == 401, f"tampered parameter: {r.status_code}")
        # Unsupported signature method: 400.
        c = Client(self.key, client_secret=self.secret, signature_method=SIGNATURE_HMAC)
        uri, headers, _ = c.sign(url, http_method="POST")
        headers["Authorization"] = headers["Authorization"].replace("HMAC-SHA1", "HMAC-SHA256")
        r = requests.post(uri, headers=headers, timeout=TIMEOUT)
        check(r.status_code == 400, f"unsupported method: {r.status_code}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", required=True)
    p.add_argument("--consumer-key", required=True)
    p.add_argument("--consumer-secret", required=True)
    p.add_argument("--username", required=True)
    p.add_argument("--password", required=True)
    args = p.parse_args()
    try:
        for method in (SIGNATURE_HMAC, SIGNATURE_PLAINTEXT):
            flow = Flow(args, method)
            at, at_secret = flow.three_legged_oob()
            flow.resources(at, at_secret)
            at, at_secret = flow.three_legged_callback()
            flow.resources(at, at_secret)
            flow.refusals()
            print(f"ok: OAuth 1.0 with {method}")
    except CheckFailed as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
