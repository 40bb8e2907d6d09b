#!/usr/bin/env python3
"""Turn bench/graphql/run.sh's results.tsv into the markdown table and ratios.

    report.py work/results.tsv

With several rounds, each cell is the median over the rounds.

Besides req/s and latency, each case reports CPU microseconds per request:
"server" is what the target's own processes used (gatehouse; PostGraphile's
Node process plus the PostgreSQL server processes; for gatehouse on
PostgreSQL, also those), "own" the target's process alone (without
PostgreSQL's), "machine" what every core of the host used (the
load generator and the kernel's loopback network work included). On a small
host where wrk shares the cores, req/s ratios between a fast and a slow
server are capped by what the load generator and the kernel cost per
request; the server CPU ratio is the efficiency comparison that is not.

The "ws" case (the flat query over WebSocket) is driven by
bench/subscriptions/loadgen instead of wrk: its machine CPU holds that
client's cost, not wrk's.
"""

import csv
import statistics
import sys

LABELS = {
    "hello": "axum hello-world (100-byte JSON)",
    "gatehouse-sqlite": "gatehouse, SQLite",
    "gatehouse-sqlite-anon": "gatehouse, SQLite, anonymous_read (no token)",
    "gatehouse-postgres": "gatehouse, PostgreSQL",
    "gatehouse-postgres-socket": "gatehouse, PostgreSQL (Unix socket)",
    "gatehouse-postgres-workers": "gatehouse, PostgreSQL (PG_WORKERS worker threads)",
    "postgraphile": "PostGraphile v5, PostgreSQL",
    "baseline-sqlite": "baseline gatehouse, SQLite",
    "baseline-postgres": "baseline gatehouse, PostgreSQL",
}


def main():
    rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
    cells = {}
    order = []
    for r in rows:
        key = (r["target"], r["query"])
        if key not in cells:
            order.append(key)
            cells[key] = []
        cells[key].append(r)

    def med(key, field):
        return statistics.median(float(r[field]) for r in cells[key])

    def bad(key):
        return sum(int(r["non2xx"]) + int(r["socket_errors"]) for r in cells[key])

    rounds = max(len(v) for v in cells.values())
    def cpu(key, field):
        return med(key, field) if all(r.get(field) for r in cells[key]) else None

    def us(v):
        return "" if v is None else f"{v:.1f}"

    print(
        "| target | query | req/s | p50 ms | p99 ms | non-2xx / socket errors "
        "| server CPU µs/req | own CPU µs/req | machine CPU µs/req |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for key in order:
        print(
            f"| {LABELS.get(key[0], key[0])} | {key[1]} | {med(key, 'rps'):,.0f} "
            f"| {med(key, 'p50_ms'):.2f} | {med(key, 'p99_ms'):.2f} | {bad(key)} "
            f"| {us(cpu(key, 'server_cpu_us'))} | {us(cpu(key, 'own_cpu_us'))} "
            f"| {us(cpu(key, 'busy_cpu_us'))} |"
        )
    if rounds > 1:
        print(f"\n(median of {rounds} rounds)")

    def ratio(a, b):
        if a in cells and b in cells:
            return med(a, "rps") / med(b, "rps")
        return None

    print("\nRatios (req/s):\n")
    checks = []
    for gh in ("gatehouse-sqlite", "gatehouse-sqlite-anon", "gatehouse-postgres", "gatehouse-postgres-socket", "gatehouse-postgres-workers"):
        if (gh, "flat") not in cells:
            continue
        for q in ("flat", "nested", "lookup"):
            r = ratio((gh, q), ("postgraphile", q))
            if r is not None:
                print(f"- {LABELS[gh]} / PostGraphile, {q}: **{r:.2f}x**")
                if gh == "gatehouse-sqlite" and q != "lookup":
                    need = 10 if q == "flat" else 8
                    checks.append((f"SQLite {q} >= {need}x PostGraphile", r >= need, f"{r:.2f}x"))
            if (gh, q) in cells and ("postgraphile", q) in cells:
                ours, theirs = cpu((gh, q), "server_cpu_us"), cpu(("postgraphile", q), "server_cpu_us")
                if ours and theirs:
                    print(f"  - server CPU per request, PostGraphile / {LABELS[gh]}, {q}: {theirs / ours:.2f}x")
            r = ratio((gh, q), ("hello", "fixed"))
            if r is not None and q != "lookup":
                print(f"- {LABELS[gh]} / hello-world, {q}: **{r:.1%}**")
                if gh == "gatehouse-sqlite" and q == "flat":
                    checks.append(("SQLite flat >= 25% of hello-world", r >= 0.25, f"{r:.1%}"))
    for gh in ("gatehouse-sqlite", "gatehouse-postgres", "gatehouse-postgres-workers"):
        r = ratio((gh, "rest"), (gh, "flat"))
        if r is not None:
            print(f"- {LABELS[gh]}: REST GET /v1/books?per_page=10 / GraphQL flat: **{r:.2f}x**")
            if gh == "gatehouse-sqlite":
                checks.append(("SQLite REST >= GraphQL flat", r >= 1, f"{r:.2f}x"))
        r = ratio((gh, "rest_fields"), (gh, "flat"))
        if r is not None:
            print(f"- {LABELS[gh]}: REST GET /v1/books?per_page=10&fields=title,year / GraphQL flat: **{r:.2f}x**")
        r = ratio((gh, "rest"), (gh, "full"))
        if r is not None:
            print(f"- {LABELS[gh]}: REST full page / GraphQL same fields: **{r:.2f}x**")
    for gh in ("gatehouse-sqlite", "gatehouse-postgres"):
        r = ratio((gh, "count"), (gh, "flat"))
        if r is not None:
            print(f"- {LABELS[gh]}: root count / GraphQL flat: **{r:.1%}**")
            checks.append((f"{LABELS[gh]} count within 15% of flat", r >= 0.85, f"{r:.1%}"))
    for gh in ("gatehouse-sqlite", "gatehouse-postgres"):
        r = ratio((gh, "atomic"), (gh, "flat"))
        if r is not None:
            print(f"- {LABELS[gh]}: atomic mutation (two creates, one transaction) / GraphQL flat: **{r:.1%}**")
        r = ratio((gh, "connection"), (gh, "flat"))
        if r is not None:
            print(f"- {LABELS[gh]}: connection page / GraphQL flat: **{r:.1%}**")
            checks.append((f"{LABELS[gh]} connection within 15% of flat", r >= 0.85, f"{r:.1%}"))
    for gh in ("gatehouse-postgres",):
        r = ratio((gh, "create"), ("postgraphile", "create"))
        if r is not None:
            print(f"- {LABELS[gh]} / PostGraphile, create: **{r:.2f}x**")
            ours, theirs = cpu((gh, "create"), "server_cpu_us"), cpu(("postgraphile", "create"), "server_cpu_us")
            if ours and theirs:
                print(f"  - server CPU per request, PostGraphile / {LABELS[gh]}, create: {theirs / ours:.2f}x")
    r = ratio(("gatehouse-sqlite", "ws"), ("gatehouse-sqlite", "flat"))
    if r is not None:
        print(f"- {LABELS['gatehouse-sqlite']}: WebSocket / HTTP, flat: **{r:.2f}x**")
        ours, http = cpu(("gatehouse-sqlite", "ws"), "server_cpu_us"), cpu(("gatehouse-sqlite", "flat"), "server_cpu_us")
        if ours and http:
            print(f"  - server CPU per request, HTTP / WebSocket, flat: {http / ours:.2f}x")
    for gh in ("gatehouse-sqlite", "gatehouse-postgres"):
        r = ratio((gh, "owned"), (gh, "flat"))
        if r is not None:
            print(f"- {LABELS[gh]}: owner-filtered notes / GraphQL flat: **{r:.1%}**")
            checks.append((f"{LABELS[gh]} owner-filtered within 10% of flat", r >= 0.9, f"{r:.1%}"))
        r = ratio((gh, "membership"), (gh, "owned"))
        if r is not None:
            print(f"- {LABELS[gh]}: membership-filtered list / owner-filtered notes: **{r:.1%}**")
            checks.append((f"{LABELS[gh]} membership within 25% of owner-filtered", r >= 0.75, f"{r:.1%}"))
    for q in ("flat", "nested"):
        r = ratio(("gatehouse-sqlite", q), ("gatehouse-sqlite-anon", q))
        if r is not None:
            print(f"- Bearer token / anonymous_read, SQLite {q}: **{r:.1%}**")
            if q == "flat":
                checks.append(("Bearer costs at most 10% (flat)", r >= 0.9, f"{r:.1%}"))
    for q in ("flat", "nested"):
        key = ("gatehouse-sqlite", q)
        if key in cells:
            p99 = med(key, "p99_ms")
            checks.append((f"SQLite {q} p99 < 10 ms", p99 < 10, f"{p99:.2f} ms"))

    for gh, base in (("gatehouse-sqlite", "baseline-sqlite"), ("gatehouse-postgres", "baseline-postgres")):
        for q in ("flat", "nested", "owned", "rest", "lookup"):
            r = ratio((gh, q), (base, q))
            if r is not None:
                print(f"- {LABELS[gh]} / baseline, {q}: **{r:.1%}**")
                ours, theirs = cpu((gh, q), "server_cpu_us"), cpu((base, q), "server_cpu_us")
                if ours and theirs:
                    print(f"  - server CPU per request, this build / baseline: {ours / theirs:.1%}")
                if q in ("flat", "nested"):
                    checks.append((f"{LABELS[gh]} {q} within 5% of the baseline", r >= 0.95, f"{r:.1%}"))

    print("\nTargets (gatehouse on SQLite, with the example config):\n")
    for name, ok, val in checks:
        print(f"- {name}: {val} -> {'MET' if ok else 'MISSED'}")


if __name__ == "__main__":
    main()
