#!/usr/bin/env python3
"""Head-of-line benchmark client (bench/hol/run.sh).

    load.py BASE_URL PG_URL SECONDS MODE

Measures the simple reads (GET /v1/books/{id}, one indexed statement each)
that READERS threads complete in SECONDS, while MODE disturbs:

  quiet  nothing else runs;
  scan   one client loops over a slow scan: GET /v1/books?title_contains=...
         over the whole table (a sequential scan of every row);
  lock   a row of `author` is locked from a second connection (psql,
         `SELECT ... FOR UPDATE` in an open transaction) and LOCKERS
         clients keep updating that row through gatehouse (PATCH), each
         waiting on the lock until the statement timeout.

Prints one line: `MODE reads/s p99_ms disturbing_requests`.
"""
import http.client
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse

base, pg_url, seconds, mode = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
READERS = int(os.environ.get("READERS", "8"))
LOCKERS = int(os.environ.get("LOCKERS", "2"))
u = urllib.parse.urlparse(base)


def conn():
    return http.client.HTTPConnection(u.hostname, u.port, timeout=120)


def get(c, path):
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    return r.status, body


ids = [row["id"] for row in json.loads(get(conn(), "/v1/books?per_page=100")[1])]
author = json.loads(get(conn(), "/v1/authors?per_page=1")[1])[0]["id"]
stop = time.monotonic() + seconds
lat, lock = [], threading.Lock()
disturbing = [0]


def reader(k):
    c, mine, i = conn(), [], k
    while time.monotonic() < stop:
        t = time.monotonic()
        status, _ = get(c, f"/v1/books/{ids[i % len(ids)]}")
        mine.append(time.monotonic() - t)
        i += 1
        if status != 200:
            print(f"read answered {status}", file=sys.stderr)
    with lock:
        lat.extend(mine)


def scanner():
    c = conn()
    while time.monotonic() < stop:
        get(c, "/v1/books?per_page=10&title_contains=zzz-no-such-title")
        disturbing[0] += 1


def token():
    """A write-scoped access token of the example's demo client."""
    c = conn()
    form = "grant_type=client_credentials&scope=write"
    auth = "Basic ZGVtby1hcHA6ZGVtby1zZWNyZXQtY2hhbmdlLW1l"  # demo-app:demo-secret-change-me
    c.request("POST", "/oauth/token", form,
              {"content-type": "application/x-www-form-urlencoded", "authorization": auth})
    return json.loads(c.getresponse().read())["access_token"]


def locker(k, bearer):
    c = conn()
    while time.monotonic() < stop:
        body = json.dumps({"name": f"renamed {k} {time.monotonic()}"})
        c.request("PATCH", f"/v1/authors/{author}", body,
                  {"content-type": "application/json", "authorization": f"Bearer {bearer}"})
        c.getresponse().read()
        disturbing[0] += 1


threads = [threading.Thread(target=reader, args=(k,)) for k in range(READERS)]
held = None
if mode == "scan":
    threads.append(threading.Thread(target=scanner))
elif mode == "lock":
    held = subprocess.Popen(["psql", "-q", pg_url], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    held.stdin.write(f"BEGIN; SELECT 1 FROM author WHERE id = '{author}' FOR UPDATE;\n")
    held.stdin.flush()
    time.sleep(0.5)
    bearer = token()
    threads += [threading.Thread(target=locker, args=(k, bearer)) for k in range(LOCKERS)]

def release():
    """Ends the lock when the measurement ends, so waiting updates finish."""
    time.sleep(max(0.0, stop - time.monotonic()))
    held.stdin.write("ROLLBACK;\n")
    held.stdin.close()
    held.wait()


if held is not None:
    threads.append(threading.Thread(target=release))
for t in threads:
    t.start()
for t in threads:
    t.join()
lat.sort()
p99 = lat[int(len(lat) * 0.99)] * 1000 if lat else 0
print(f"{mode} {len(lat) / seconds:.0f} {p99:.1f} {disturbing[0]}")
