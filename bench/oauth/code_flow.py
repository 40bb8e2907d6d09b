"""The authorization code flow under load, as browsers drive it.

Runs, from CONCURRENCY threads for DURATION seconds each:
  flow      the whole flow per iteration: GET /oauth/authorize (the
            sign-in page), POST the form (CSRF cookie and field, password:
            argon2id), 302 with the code, POST /oauth/token with the code
            and the PKCE verifier;
  code      only the token request of the flow (codes made beforehand),
            i.e. token issuance by authorization_code;
  cc        token issuance by client_credentials, the same driver.
Prints one line per case: completed/s, p50 and p99 in ms, failures.

  python3 bench/oauth/code_flow.py --base-url http://127.0.0.1:8080 \
      --client-id demo-spa --redirect-uri http://127.0.0.1/callback \
      --username bob --password bob-password \
      --cc-client demo-app:demo-secret-change-me

Needs `requests` (tests/external's venv has it). The driver is Python: the
`code` and `cc` cases share it, so their ratio is fair; their absolute
rates are the driver's as much as the server's.
"""

import argparse
import base64
import hashlib
import secrets
import statistics
import threading
import time
from html.parser import HTMLParser
from urllib.parse import parse_qs, urlencode, urlsplit

import requests

TIMEOUT = 30


class Hidden(HTMLParser):
    def __init__(self):
        super().__init__()
        self.fields = {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "input" and a.get("type") == "hidden" and "name" in a:
            self.fields[a["name"]] = a.get("value", "")


def hidden(html):
    p = Hidden()
    p.feed(html)
    return p.fields


def pkce():
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def get_code(a, session):
    """The browser's part: sign-in page, form post; returns (code, verifier)."""
    verifier, challenge = pkce()
    state = secrets.token_urlsafe(16)
    query = urlencode({
        "response_type": "code", "client_id": a.client_id, "redirect_uri": a.redirect_uri,
        "scope": "read", "state": state, "code_challenge": challenge,
        "code_challenge_method": "S256",
    })
    page = session.get(f"{a.base}/oauth/authorize?{query}", timeout=TIMEOUT)
    page.raise_for_status()
    form = {**hidden(page.text), "action": "sign_in", "username": a.username, "password": a.password}
    resp = session.post(f"{a.base}/oauth/authorize", data=form, allow_redirects=False, timeout=TIMEOUT)
    if resp.status_code == 200 and "ticket" in hidden(resp.text):
        resp = session.post(f"{a.base}/oauth/authorize",
                            data={**hidden(resp.text), "action": "consent"},
                            allow_redirects=False, timeout=TIMEOUT)
    if resp.status_code != 302:
        raise RuntimeError(f"sign-in answered {resp.status_code}: {resp.text[:200]}")
    params = parse_qs(urlsplit(resp.headers["location"]).query)
    return params["code"][0], verifier


def redeem(a, session, code, verifier):
    resp = session.post(f"{a.base}/oauth/token", data={
        "grant_type": "authorization_code", "code": code, "redirect_uri": a.redirect_uri,
        "client_id": a.client_id, "code_verifier": verifier,
    }, timeout=TIMEOUT)
    if resp.status_code != 200:
        raise RuntimeError(f"token answered {resp.status_code}: {resp.text[:200]}")


def client_credentials(a, session):
    cid, secret = a.cc_client.split(":", 1)
    resp = session.post(f"{a.base}/oauth/token", auth=(cid, secret),
                        data={"grant_type": "client_credentials", "scope": "read"}, timeout=TIMEOUT)
    if resp.status_code != 200:
        raise RuntimeError(f"token answered {resp.status_code}: {resp.text[:200]}")


def load(name, a, work, prepare=None):
    """Runs `work(session, item)` from a.concurrency threads for a.duration;
    with `prepare`, each thread first makes its items (not timed) and stops
    when they run out."""
    latencies, failures, lock = [], [0], threading.Lock()
    clock = {}

    def started():
        clock["start"] = time.monotonic()
        clock["deadline"] = clock["start"] + a.duration

    barrier = threading.Barrier(a.concurrency, action=started)

    def worker():
        session = requests.Session()
        items = prepare(session) if prepare else None
        barrier.wait()
        while time.monotonic() < clock["deadline"]:
            if prepare and not items:
                break
            item = items.pop() if prepare else None
            t = time.perf_counter()
            try:
                work(session, item)
                dt = time.perf_counter() - t
                with lock:
                    latencies.append(dt)
            except Exception as e:  # noqa: BLE001 - counted and shown once
                with lock:
                    failures[0] += 1
                    if failures[0] == 1:
                        print(f"{name}: first failure: {e}")

    threads = [threading.Thread(target=worker) for _ in range(a.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - clock["start"]
    latencies.sort()
    n = len(latencies)
    p = lambda q: latencies[min(n - 1, int(q * n))] * 1000 if n else float("nan")  # noqa: E731
    print(f"{name:6} {n / elapsed:9.1f}/s  p50 {p(0.5):7.1f} ms  p99 {p(0.99):7.1f} ms  "
          f"n {n}  failures {failures[0]}")
    return n / elapsed if elapsed else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--client-id", required=True)
    ap.add_argument("--redirect-uri", required=True)
    ap.add_argument("--username", required=True)
    ap.add_argument("--password", required=True)
    ap.add_argument("--cc-client", required=True, help="client_id:secret for client_credentials")
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--codes", type=int, default=200, help="codes per thread for the `code` case")
    a = ap.parse_args()
    a.base = a.base_url.rstrip("/")

    flow = load("flow", a, lambda s, _: redeem(a, s, *get_code(a, s)))
    # Codes live 60 s: make them per thread right before redeeming them.
    code = load("code", a, lambda s, item: redeem(a, s, *item),
                prepare=lambda s: [get_code(a, s) for _ in range(a.codes)])
    cc = load("cc", a, lambda s, _: client_credentials(a, s))
    if cc:
        print(f"code/cc {code / cc:.2f}")


if __name__ == "__main__":
    main()
