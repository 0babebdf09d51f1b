"""Correctness check before timing: both servers must answer like the model.

    python check.py UTTERANCES_JSONL NAME=URL [NAME=URL ...]

For each server: every reference query of `models/sanity.json` must be 200 with its intent, then
every test utterance is classified once (sequentially, one keep-alive connection); prints accuracy
against the SNIPS labels, and how often the servers agree on the intent and by how much their
scores differ. Exits 1 on a wrong sanity answer, a non-200 answer, or servers disagreeing on more
than 1 % of the utterances (same model file, so they should agree on all of them).
"""

import http.client
import json
import sys
import urllib.parse
from pathlib import Path

SANITY = json.loads((Path(__file__).resolve().parents[2] / "models" / "sanity.json").read_text(encoding="utf-8"))


def get(conn: http.client.HTTPConnection, text: str) -> tuple[int, dict]:
    conn.request("GET", "/predict?query=" + urllib.parse.quote(text, safe=""))
    resp = conn.getresponse()
    body = resp.read()
    return resp.status, (json.loads(body) if resp.status == 200 else {"body": body[:200]})


def main() -> None:
    rows = [(r["intent"], r["text"]) for r in map(json.loads, open(sys.argv[1], encoding="utf-8"))]
    servers = [arg.split("=", 1) for arg in sys.argv[2:]]
    answers = {}
    failed = False
    for name, url in servers:
        u = urllib.parse.urlsplit(url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        for q in SANITY["queries"]:
            status, body = get(conn, q["text"])
            ok = status == 200 and body.get("intent") == q["intent"]
            if not ok:
                print(f"  {name}: {q['text']!r} -> {status} {body}, expected {q['intent']}: WRONG")
            failed |= not ok
        print(f"  {name}: {len(SANITY['queries'])} reference queries of models/sanity.json checked")
        got, bad = [], 0
        for _intent, text in rows:
            status, body = get(conn, text)
            bad += status != 200
            got.append((body.get("intent"), body.get("score")))
        conn.close()
        correct = sum(g[0] == r[0] for g, r in zip(got, rows))
        print(f"  {name}: {correct}/{len(rows)} test utterances correct ({100 * correct / len(rows):.1f} %), "
              f"{bad} non-200")
        failed |= bad > 0
        answers[name] = got
    names = list(answers)
    for other in names[1:]:
        a, b = answers[names[0]], answers[other]
        same = sum(x[0] == y[0] for x, y in zip(a, b))
        diff = max((abs(x[1] - y[1]) for x, y in zip(a, b) if x[1] is not None and y[1] is not None), default=0.0)
        print(f"  {names[0]} vs {other}: same intent on {same}/{len(a)}, largest score difference {diff:.2e}")
        failed |= same < 0.99 * len(a)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
