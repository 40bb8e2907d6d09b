#!/usr/bin/env python3
"""Turn bench/oauth/run.sh's results.tsv into the markdown table and targets.

    report.py work/results.tsv
"""

import csv
import sys

LABELS = {
    "gatehouse-sqlite": "gatehouse, SQLite",
    "gatehouse-postgres": "gatehouse, PostgreSQL",
    "oidc-provider": "oidc-provider (in-memory adapter)",
}


def main():
    rows = {(r["target"], r["endpoint"]): r for r in csv.DictReader(open(sys.argv[1]), delimiter="\t")}
    print("| target | endpoint | req/s | p50 ms | p99 ms | non-2xx / socket errors |")
    print("|---|---|---:|---:|---:|---:|")
    for (target, endpoint), r in rows.items():
        bad = int(r["non2xx"]) + int(r["socket_errors"])
        print(f"| {LABELS.get(target, target)} | {endpoint} | {float(r['rps']):,.0f} "
              f"| {float(r['p50_ms']):.2f} | {float(r['p99_ms']):.2f} | {bad} |")

    def rps(key):
        return float(rows[key]["rps"]) if key in rows else None

    print("\nTargets:\n")
    op = rps(("oidc-provider", "issue"))
    for gh in ("gatehouse-sqlite", "gatehouse-postgres"):
        mine = rps((gh, "issue"))
        if mine is not None and op:
            ratio = mine / op
            print(f"- {LABELS[gh]}: issuance {ratio:.2f}x oidc-provider (target >= 5x) -> "
                  f"{'MET' if ratio >= 5 else 'MISSED'}")
        if (gh, "issue") in rows:
            p99 = float(rows[(gh, "issue")]["p99_ms"])
            print(f"- {LABELS[gh]}: issuance p99 {p99:.2f} ms (target < 20 ms) -> "
                  f"{'MET' if p99 < 20 else 'MISSED'}")
        intro = rps((gh, "introspect"))
        if intro is not None:
            print(f"- {LABELS[gh]}: {intro:,.0f} introspections/s (target >= 20,000) -> "
                  f"{'MET' if intro >= 20000 else 'MISSED'}")


if __name__ == "__main__":
    main()
