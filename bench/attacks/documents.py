#!/usr/bin/env python3
"""Costly GraphQL documents against a running server: how long each takes
to be answered (the most expensive document the default limits admit among them) and what 48 distinct 830 KB documents do to resident memory.

Usage: start the example (`gatehouse serve --config examples/library/gatehouse.toml`),
then `bench/attacks/documents.py [BASE_URL]` (default http://127.0.0.1:8080).
It creates an author and 500 books through the demo client and user.
"""
import base64
import json
import os
import sys
import time
import urllib.request

BASE = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080"


def post(path, data, headers):
    req = urllib.request.Request(BASE + path, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


client = "Basic " + base64.b64encode(b"demo-app:demo-secret-change-me").decode()
_, body = post(
    "/oauth/token",
    b"grant_type=password&username=alice&password=alice-password&scope=read%20write",
    {"Authorization": client, "Content-Type": "application/x-www-form-urlencoded"},
)
H = {"Authorization": "Bearer " + json.loads(body)["access_token"], "Content-Type": "application/json"}


def gql(q):
    t = time.time()
    status, b = post("/graphql", json.dumps({"query": q}).encode(), H)
    return status, time.time() - t, json.loads(b)


_, _, r = gql('mutation { createAuthor(name: "Bench %f") { id } }' % time.time())
author = r["data"]["createAuthor"]["id"]
for i in range(500):
    post("/v1/books", json.dumps({"title": "b%d" % i, "status": "AVAILABLE", "author": author}).encode(), H)


def report(name, q):
    status, secs, r = gql(q)
    code = r.get("errors", [{}])[0].get("extensions", {}).get("code", "ok")
    print("%-45s %5d KB  %d %-20s %6.3f s" % (name, len(q) // 1024, status, code, secs))


report("2,000 __typename aliases x books(first: 500)",
       "{ books(first: 500) { " + " ".join("a%d: __typename" % i for i in range(2000)) + " } }")
report("50,000 top-level aliases", "{ " + " ".join("a%d: __typename" % i for i in range(50000)) + " }")
report("1,000 aliases of books(first: 500)",
       "{ " + " ".join("a%d: books(first: 500) { id }" % i for i in range(1000)) + " }")
# The most the default limits admit (complexity 249,501 of 250,000): every
# one of the 500 books reaches the author of 500 books, so the answer holds
# 248,500 nested rows.
report("books(first: 500) { id author { books(first: 496) } }",
       "{ books(first: 500) { id author { books(first: 496) { id } } } }")
report("three levels of lists at the default page size",
       "{ authors { name books { title reviews { stars } } } }")
report("where: NOT nested 31 deep (the most admitted)",
       "{ books(where: " + "{NOT: " * 31 + "{year_gt: 1}" + "}" * 31 + ") { id } }")
report("where: NOT nested 1,500 deep",
       "{ books(where: " + "{NOT: " * 1500 + "{year_gt: 1}" + "}" * 1500 + ") { id } }")
report("where: OR of 4,999 terms",
       "{ books(where: {OR: [" + ", ".join("{year: %d}" % i for i in range(4999)) + "]}) { id } }")

pid = int(os.popen("pgrep -f 'gatehouse serve'").read().split()[0])


def rss_mb():
    with open("/proc/%d/status" % pid) as f:
        return int(next(l for l in f if l.startswith("VmRSS")).split()[1]) // 1024


for rnd in range(3):
    before = rss_mb()
    for k in range(16):
        status, secs, _ = gql("{" + " ".join("x%d" % i for i in range(120000)) + "} #%d-%d-%f" % (rnd, k, time.time()))
    print("16 distinct 830 KB documents, round %d: RSS %d -> %d MB (last answered in %.2f s)" % (rnd, before, rss_mb(), secs))
