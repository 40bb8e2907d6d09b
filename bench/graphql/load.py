#!/usr/bin/env python3
"""Load the benchmark dataset into a running gatehouse through GraphQL.

    load.py URL [--authors 1000] [--books 10000] [--token TOKEN]
            [--notes 10000 --other-token TOKEN2] [--groups 3 --group-books 1000]

URL is the GraphQL endpoint (e.g. http://127.0.0.1:18081/graphql). Rows are
created with the example schema's own mutations (`createAuthor`,
`createBook`), several aliased mutations per request, a few requests in
flight at once. The data is deterministic (fixed seed), so SQLite and
PostgreSQL get the same rows apart from the generated ids.

Only the standard library is used.
"""

import argparse
import base64
import json
import random
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

STATUSES = ["AVAILABLE", "AVAILABLE", "AVAILABLE", "ON_LOAN", "LOST"]
WORDS = (
    "river stone night garden silver winter letter house shadow glass "
    "north light empire salt harbour orchard mirror storm fox lantern "
    "quiet iron summer ember cloud violet harvest bridge tide"
).split()


def gql(url, token, query, variables=None):
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            out = json.loads(resp.read())
    except urllib.error.HTTPError as e:
        raise SystemExit(f"load.py: HTTP {e.code} from {url}: {e.read()[:500]!r}")
    if out.get("errors"):
        raise SystemExit(f"load.py: GraphQL errors: {json.dumps(out['errors'])[:800]}")
    return out["data"]


def batched(items, n):
    for i in range(0, len(items), n):
        yield items[i : i + n]


def create_authors(url, token, rng, count, batch, workers):
    authors = []
    for i in range(count):
        born = f"{rng.randint(1900, 1995)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        authors.append({"name": f"Author {i:04d} {rng.choice(WORDS).title()}", "born": born})

    def send(chunk):
        decl = ", ".join(f"$n{j}: String!, $b{j}: Date" for j in range(len(chunk)))
        sel = " ".join(
            f"a{j}: createAuthor(name: $n{j}, born: $b{j}) {{ id }}" for j in range(len(chunk))
        )
        variables = {}
        for j, a in enumerate(chunk):
            variables[f"n{j}"] = a["name"]
            variables[f"b{j}"] = a["born"]
        data = gql(url, token, f"mutation({decl}) {{ {sel} }}", variables)
        return [data[f"a{j}"]["id"] for j in range(len(chunk))]

    with ThreadPoolExecutor(workers) as pool:
        ids = [i for chunk in pool.map(send, list(batched(authors, batch))) for i in chunk]
    return ids


def create_books(url, token, rng, author_ids, count, batch, workers):
    books = []
    for i in range(count):
        books.append(
            {
                "title": f"The {rng.choice(WORDS).title()} of {rng.choice(WORDS).title()} #{i}",
                "year": rng.randint(1850, 2025),
                "status": rng.choice(STATUSES),
                "isbn": f"978{i:010d}",
                "rating": round(rng.uniform(1, 5), 1),
                "tags": rng.sample(WORDS, 2),
                # Spread books over every author (10 each on average).
                "author": author_ids[rng.randrange(len(author_ids))],
            }
        )

    def send(chunk):
        decl = ", ".join(f"$i{j}: BookInput!" for j in range(len(chunk)))
        sel = " ".join(f"b{j}: createBook(input: $i{j}) {{ id }}" for j in range(len(chunk)))
        variables = {f"i{j}": b for j, b in enumerate(chunk)}
        data = gql(url, token, f"mutation({decl}) {{ {sel} }}", variables)
        return len(data)

    with ThreadPoolExecutor(workers) as pool:
        return sum(pool.map(send, list(batched(books, batch))))


def create_notes(url, tokens, rng, count, batch, workers):
    """Owner-only notes (`Note @policy(all: {owner: "$sub"})`), created in
    turn with each token: each owner holds an equal share of the table."""
    book_ids = [b["id"] for b in gql(url, tokens[0], "{ books(first: 500) { id } }")["books"]]
    notes = [
        (tokens[i % len(tokens)], {"b": rng.choice(book_ids), "t": f"note {i} {rng.choice(WORDS)}"})
        for i in range(count)
    ]

    def send(chunk):
        token = chunk[0][0]
        decl = ", ".join(f"$b{j}: ID!, $t{j}: String!" for j in range(len(chunk)))
        sel = " ".join(f"n{j}: createNote(book: $b{j}, text: $t{j}) {{ id }}" for j in range(len(chunk)))
        variables = {}
        for j, (_, n) in enumerate(chunk):
            variables[f"b{j}"] = n["b"]
            variables[f"t{j}"] = n["t"]
        return len(gql(url, token, f"mutation({decl}) {{ {sel} }}", variables))

    # Batches of one owner each.
    chunks = []
    for token in tokens:
        mine = [n for n in notes if n[0] == token]
        chunks.extend(batched(mine, batch))
    with ThreadPoolExecutor(workers) as pool:
        return sum(pool.map(send, chunks))


def sub_of(token):
    """The `sub` of a JWT access token (read, not verified: the server issued it)."""
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["sub"]


def create_groups(url, tokens, rng, groups, per_group, batch, workers):
    """Reading groups whose lists are read under a membership policy
    (`GroupBook @policy(all: {group: {members_some: {user: "$sub"}}})`):
    the first token's user creates and joins one group, the others the
    rest, each group holding `per_group` books."""
    book_ids = [b["id"] for b in gql(url, tokens[0], "{ books(first: 500) { id } }")["books"]]
    owners = [tokens[0]] + [tokens[-1]] * (groups - 1)
    chunks = []
    for g, token in enumerate(owners):
        gid = gql(url, token, "mutation($n: String!, $u: String!) { createReadingGroup("
                  "input: {name: $n, members: [{user: $u, role: OWNER}]}) { id } }",
                  {"n": f"group {g}", "u": sub_of(token)})["createReadingGroup"]["id"]
        books = [rng.choice(book_ids) for _ in range(per_group)]
        chunks.extend((token, gid, chunk) for chunk in batched(books, batch))

    def send(chunk):
        token, gid, books = chunk
        decl = ", ".join(f"$b{j}: ID!" for j in range(len(books)))
        sel = " ".join(f"n{j}: addGroupBook(group: $g, book: $b{j}) {{ id }}" for j in range(len(books)))
        variables = {"g": gid, **{f"b{j}": b for j, b in enumerate(books)}}
        return len(gql(url, token, f"mutation($g: ID!, {decl}) {{ {sel} }}", variables))

    with ThreadPoolExecutor(workers) as pool:
        return sum(pool.map(send, chunks))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("url")
    p.add_argument("--authors", type=int, default=1000)
    p.add_argument("--books", type=int, default=10000)
    p.add_argument("--token", default="")
    p.add_argument("--notes", type=int, default=0, help="owner-only notes, shared among the tokens")
    p.add_argument("--other-token", default="", help="a second owner of notes")
    p.add_argument("--groups", type=int, default=0, help="reading groups, one of them the first token's")
    p.add_argument("--group-books", type=int, default=1000, help="books on each group's list")
    p.add_argument("--batch", type=int, default=50, help="mutations per request")
    p.add_argument("--workers", type=int, default=4, help="requests in flight")
    p.add_argument("--seed", type=int, default=20261)
    a = p.parse_args()

    rng = random.Random(a.seed)
    t0 = time.time()
    author_ids = create_authors(a.url, a.token, rng, a.authors, a.batch, a.workers)
    t1 = time.time()
    n = create_books(a.url, a.token, rng, author_ids, a.books, a.batch, a.workers)
    t2 = time.time()
    print(
        f"loaded {len(author_ids)} authors in {t1 - t0:.1f}s and {n} books in {t2 - t1:.1f}s",
        file=sys.stderr,
    )
    if a.notes:
        tokens = [t for t in (a.token, a.other_token) if t]
        n = create_notes(a.url, tokens, rng, a.notes, a.batch, a.workers)
        print(f"loaded {n} notes of {len(tokens)} owners in {time.time() - t2:.1f}s", file=sys.stderr)
    if a.groups:
        t3 = time.time()
        tokens = [t for t in (a.token, a.other_token) if t]
        n = create_groups(a.url, tokens, rng, a.groups, a.group_books, a.batch, a.workers)
        print(f"loaded {a.groups} groups with {n} listed books in {time.time() - t3:.1f}s", file=sys.stderr)


if __name__ == "__main__":
    main()
