"""Webhook deliveries checked by an independent implementation.

Starts a small HTTP receiver, then gatehouse with one `[[webhooks]]` entry
pointing at it, makes a create, an update and a delete over GraphQL, and
checks every delivery with the `standardwebhooks` package (the Standard
Webhooks reference implementation for Python): the signature over
`webhook-id`, `webhook-timestamp` and the raw body, the body's shape
`{type, timestamp, data: {id, new, old}}`, and that a delivery the
receiver refused once (HTTP 500) comes again with the same `webhook-id`
and the same bytes.

Usage: python webhooks.py --bin PATH/TO/gatehouse
"""

import argparse
import base64
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

SECRET = "whsec_" + base64.b64encode(b"an external test's 32-byte key!!").decode()

SCHEMA = """
enum Status { TODO DONE }
type Task { id: ID! title: String! status: Status! }
"""

CONFIG = """listen = "127.0.0.1:0"
database = "sqlite://{dir}/webhooks.db"
schema = ["schema.graphql"]

[[bootstrap.clients]]
client_id = "app"
client_secret = "app-secret-0123456789"
grants = ["password"]
scopes = ["read", "write"]

[[bootstrap.users]]
username = "ann"
password = "ann-password-0123"
scopes = ["read", "write"]

[[webhooks]]
id = "tasks"
url = "{url}"
events = ["Task.*"]
secret = "{secret}"
"""


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


class Receiver:
    """Records every POST (headers and raw body) and answers with the given
    statuses in turn, 200 once they run out."""

    def __init__(self, answers):
        self.requests = queue.Queue()
        answers = list(answers)
        lock = threading.Lock()
        requests = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                requests.put(({k.lower(): v for k, v in self.headers.items()}, body))
                with lock:
                    status = answers.pop(0) if answers else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def next(self, wait=30):
        try:
            return self.requests.get(timeout=wait)
        except queue.Empty:
            fail(f"no delivery within {wait} s")


def post(url, data, headers):
    request = urllib.request.Request(url, data=data, headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def start_server(binary, work):
    stdout = open(os.path.join(work, "stdout"), "w+")
    stderr = open(os.path.join(work, "server.log"), "w")
    server = subprocess.Popen(
        [binary, "serve", "--config", "gatehouse.toml"],
        cwd=work,
        stdout=stdout,
        stderr=stderr,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        stdout.seek(0)
        for line in stdout.read().splitlines():
            if "listening on" in line:
                return server, line[line.index("http://") :].split()[0]
        if server.poll() is not None:
            fail("gatehouse exited:\n" + open(os.path.join(work, "server.log")).read())
        time.sleep(0.1)
    server.kill()
    fail("gatehouse did not report its address within 30 s")


def verify(webhook, headers, body):
    """The `standardwebhooks` check a receiver makes; returns the parsed body."""
    try:
        payload = webhook.verify(body, headers)
    except WebhookVerificationError as e:
        fail(f"standardwebhooks refuses a delivery ({e}): {headers} {body!r}")
    # The check is not vacuous: one changed byte of the body fails it.
    try:
        webhook.verify(body.replace(b'"', b"'", 1), headers)
        fail("standardwebhooks accepted a changed body")
    except WebhookVerificationError:
        pass
    return payload


def check_shape(payload, kind, row_id):
    check(set(payload) == {"type", "timestamp", "data"}, f"top-level keys of {payload}")
    check(payload["type"] == f"Task.{kind}", f"type {payload['type']}, not Task.{kind}")
    stamp = payload["timestamp"]
    check(stamp.endswith("Z"), f"timestamp {stamp} is UTC")
    datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    data = payload["data"]
    check(data["id"] == row_id, f"data.id {data['id']}, not {row_id}")
    want = {"created": {"id", "new"}, "updated": {"id", "new", "old"}, "deleted": {"id", "old"}}[kind]
    check(set(data) == want, f"{kind}: data has {sorted(data)}, not {sorted(want)}")
    for side in ("new", "old"):
        if side in data:
            check(data[side]["id"] == row_id, f"data.{side}.id of {payload}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    args = parser.parse_args()

    # The first delivery is refused; the outbox retries it (2.5 to 5 s later).
    receiver = Receiver([500])
    webhook = Webhook(SECRET)
    with tempfile.TemporaryDirectory() as work:
        with open(os.path.join(work, "schema.graphql"), "w") as f:
            f.write(SCHEMA)
        with open(os.path.join(work, "gatehouse.toml"), "w") as f:
            f.write(CONFIG.format(dir=work, url=receiver.url, secret=SECRET))
        server, base = start_server(os.path.abspath(args.bin), work)
        try:
            run(base, receiver, webhook)
        except BaseException:
            print(open(os.path.join(work, "server.log")).read(), file=sys.stderr)
            raise
        finally:
            server.terminate()
            server.wait(timeout=30)
    print("webhooks: every delivery verified with standardwebhooks")


def run(base, receiver, webhook):
    basic = base64.b64encode(b"app:app-secret-0123456789").decode()
    token = post(
        f"{base}/oauth/token",
        b"grant_type=password&username=ann&password=ann-password-0123&scope=read+write",
        {"Authorization": f"Basic {basic}", "Content-Type": "application/x-www-form-urlencoded"},
    )["access_token"]

    def graphql(query):
        answer = post(
            f"{base}/graphql",
            json.dumps({"query": query}).encode(),
            {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        check("errors" not in answer, f"{query}: {answer}")
        return answer["data"]

    row = graphql('mutation { createTask(input: {title: "write", status: TODO}) { id } }')
    row_id = row["createTask"]["id"]
    graphql(f'mutation {{ updateTask(id: "{row_id}", input: {{status: DONE}}) {{ id }} }}')
    graphql(f'mutation {{ deleteTask(id: "{row_id}") {{ id }} }}')

    refused_headers, refused_body = receiver.next()
    refused = verify(webhook, refused_headers, refused_body)
    check_shape(refused, "created", row_id)
    check(refused["data"]["new"]["title"] == "write", f"the new row of {refused}")
    check(refused["data"]["new"]["status"] == "TODO", f"the new row of {refused}")

    # The retry: the same delivery (id and bytes), signed again.
    headers, body = receiver.next()
    verify(webhook, headers, body)
    check(
        headers["webhook-id"] == refused_headers["webhook-id"],
        f"a retry keeps its webhook-id: {headers['webhook-id']} vs {refused_headers['webhook-id']}",
    )
    check(body == refused_body, "a retry sends the same body")

    # The row's later changes waited for it, and come in order.
    headers, body = receiver.next()
    updated = verify(webhook, headers, body)
    check_shape(updated, "updated", row_id)
    check(updated["data"]["old"]["status"] == "TODO", f"the old row of {updated}")
    check(updated["data"]["new"]["status"] == "DONE", f"the new row of {updated}")
    update_id = headers["webhook-id"]

    headers, body = receiver.next()
    deleted = verify(webhook, headers, body)
    check_shape(deleted, "deleted", row_id)
    check(deleted["data"]["old"]["status"] == "DONE", f"the old row of {deleted}")
    ids = {refused_headers["webhook-id"], update_id, headers["webhook-id"]}
    check(len(ids) == 3, f"one webhook-id per change: {ids}")

    try:
        extra = receiver.requests.get(timeout=1)
        fail(f"an unexpected delivery: {extra}")
    except queue.Empty:
        pass


if __name__ == "__main__":
    main()
