"""Checks a running worker's answers against the model's recorded ones. Standard library only, so it
runs on a GPU machine with python3 and nothing else.

    python3 models/scripts/check_worker.py http://127.0.0.1:PORT [models/build/gpu/answers.json]

`answers.json` is written by `gpu_model.py` beside the fp16 model: for each of the 700 SNIPS test
utterances, the probabilities of the committed int8 model and of the fp16 model, both from ONNX
Runtime's CPU provider. Every utterance is sent twice: alone (`GET /predict?...&all_scores=true`)
and in `POST` batches of 32 (`{"queries": [...], "all_scores": true}`, so rows are padded to the
batch's longest, or the worker's shape bucket). Passes when, both ways, the worker names the
int8 model's intent on every utterance and every class probability is within the file's
`tolerance_vs_fp16_cpu` (0.02) of the fp16 model's on CPU. Exits 1 otherwise, printing why.
"""

from __future__ import annotations

import http.client
import json
import sys
import urllib.parse
from pathlib import Path

DEFAULT_ANSWERS = Path(__file__).resolve().parents[1] / "build" / "gpu" / "answers.json"
BATCH = 32


class Worker:
    def __init__(self, url: str):
        u = urllib.parse.urlsplit(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)

    def _answer(self) -> dict:
        resp = self.conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise SystemExit(f"check_worker: HTTP {resp.status}: {body[:300]!r}")
        return json.loads(body)

    def one(self, text: str) -> dict:
        self.conn.request("GET", "/predict?all_scores=true&query=" + urllib.parse.quote(text, safe=""))
        return self._answer()

    def many(self, texts: list[str]) -> list[dict]:
        body = json.dumps({"queries": texts, "all_scores": True}).encode()
        self.conn.request("POST", "/predict", body=body, headers={"Content-Type": "application/json"})
        return self._answer()["predictions"]


def judge(how: str, rows: list[dict], got: list[dict], labels: list[str], tol: float) -> list[str]:
    bad, worst, worst_text, correct, same = [], 0.0, "", 0, 0
    for row, ans in zip(rows, got):
        want = labels[max(range(len(labels)), key=lambda i: row["int8"][i])]
        same += ans["intent"] == want
        if ans["intent"] != want:
            bad.append(f"{how}: {row['text']!r}: intent {ans['intent']}, the int8 model says {want}")
        correct += ans["intent"] == row["label"]
        scores = ans.get("scores") or {}
        if set(scores) != set(labels):
            bad.append(f"{how}: {row['text']!r}: scores for {sorted(scores)}, expected {labels}")
            continue
        diff = max(abs(scores[label] - p) for label, p in zip(labels, row["fp16_cpu"]))
        if diff > worst:
            worst, worst_text = diff, row["text"]
    if worst > tol:
        bad.append(f"{how}: probability differs from the fp16 model on CPU by {worst:.3g} > {tol} "
                   f"on {worst_text!r}")
    print(f"check_worker: {how}: same intent as the int8 model on {same}/{len(rows)}, accuracy {correct}/{len(rows)}, largest probability difference from the "
          f"fp16 model on CPU {worst:.2e} ({worst_text!r})")
    return bad


def main() -> None:
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    answers = json.loads(Path(sys.argv[2] if len(sys.argv) == 3 else DEFAULT_ANSWERS).read_text(
        encoding="utf-8"))
    rows, labels, tol = answers["rows"], answers["labels"], answers["tolerance_vs_fp16_cpu"]
    worker = Worker(sys.argv[1])
    texts = [r["text"] for r in rows]
    singles = [worker.one(t) for t in texts]
    batched = [a for i in range(0, len(texts), BATCH) for a in worker.many(texts[i:i + BATCH])]
    bad = judge("one at a time", rows, singles, labels, tol)
    bad += judge(f"batches of {BATCH}", rows, batched, labels, tol)
    for b in bad[:20]:
        print(f"check_worker: FAILED: {b}", file=sys.stderr)
    if bad:
        raise SystemExit(f"check_worker: {len(bad)} failures")
    print("check_worker: OK")


if __name__ == "__main__":
    main()
