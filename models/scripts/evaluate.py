"""Evaluate every ONNX variant with ONNX Runtime (CPU) and write `eval.json`.

For fp32, fp16 and int8: accuracy on the 700 test utterances (overall, per
intent, and the misclassified rows), predictions for the sanity queries the
Rust worker asserts on, and CPU latency (batch 1 on 1 thread; batch 32 on 1
and on all threads). Tokenization uses the committed `tokenizer.json` through
the `tokenizers` package, as the worker does. Writes the committed
`snips-minilm-l6/eval.json`, from which `card.py` renders the model card.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import statistics
import sys
import time

from common import (
    CHECKPOINT_DIR,
    FP16_DIR,
    FP32_DIR,
    LABELS,
    MODELS_DIR,
    OUT_DIR,
    PREPARED_DIR,
    SANITY_QUERIES,
    read_jsonl,
    write_json,
)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import tokenizers  # noqa: E402

VARIANTS = {
    "fp32": FP32_DIR / "model.onnx",
    "fp16": FP16_DIR / "model.onnx",
    "int8": OUT_DIR / "model.onnx",
}
COMMITTED = ["model.onnx", "tokenizer.json", "config.json"]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--min-int8-accuracy", type=float, default=0.98)
    p.add_argument("--latency-rounds", type=int, default=3,
                   help="passes over the latency sample (the first pass is a warm-up)")
    return p.parse_args()


class Classifier:
    def __init__(self, path, threads: int):
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        self.sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.tok = tokenizers.Tokenizer.from_file(str(OUT_DIR / "tokenizer.json"))
        self.tok.enable_padding(pad_id=0, pad_token="[PAD]")

    def feeds(self, texts: list[str]) -> dict[str, np.ndarray]:
        enc = self.tok.encode_batch(texts)
        return {
            "input_ids": np.array([e.ids for e in enc], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in enc], dtype=np.int64),
        }

    def logits(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        return self.sess.run(["logits"], feeds)[0]

    def predict(self, texts: list[str], batch_size: int = 32) -> list[int]:
        out: list[int] = []
        for i in range(0, len(texts), batch_size):
            out += self.logits(self.feeds(texts[i:i + batch_size])).argmax(-1).tolist()
        return out


def accuracy(clf: Classifier, rows: list[dict]) -> dict:
    preds = clf.predict([r["text"] for r in rows])
    gold = [LABELS.index(r["label"]) for r in rows]
    per_intent = {}
    for i, label in enumerate(LABELS):
        idx = [k for k, g in enumerate(gold) if g == i]
        correct = sum(preds[k] == i for k in idx)
        per_intent[label] = {"correct": correct, "total": len(idx),
                             "accuracy": round(correct / len(idx), 4)}
    correct = sum(p == g for p, g in zip(preds, gold))
    errors = [{"text": r["text"], "label": r["label"], "predicted": LABELS[p]}
              for r, p, g in zip(rows, preds, gold) if p != g]
    return {"correct": correct, "total": len(rows), "accuracy": round(correct / len(rows), 4),
            "per_intent": per_intent, "errors": errors}


def sanity(clf: Classifier) -> list[dict]:
    texts = [q for q, _ in SANITY_QUERIES]
    logits = clf.logits(clf.feeds(texts))
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return [{"text": q, "expected": want, "predicted": LABELS[int(p.argmax())],
             "score": round(float(p.max()), 4), "ok": LABELS[int(p.argmax())] == want}
            for (q, want), p in zip(SANITY_QUERIES, probs)]


def time_batches(clf: Classifier, batches: list[list[str]], rounds: int) -> dict:
    feeds = [clf.feeds(b) for b in batches]  # tokenization is not timed
    for f in feeds:  # warm-up
        clf.logits(f)
    samples = []
    for _ in range(max(rounds - 1, 1)):
        for f in feeds:
            t0 = time.perf_counter()
            clf.logits(f)
            samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    return {"runs": len(samples), "mean_ms": round(statistics.fmean(samples), 2),
            "p50_ms": round(samples[len(samples) // 2], 2),
            "p95_ms": round(samples[int(len(samples) * 0.95) - 1], 2)}


def latency(path, rows: list[dict], rounds: int) -> dict:
    texts = [r["text"] for r in rows]
    singles = [[t] for t in texts[::7]]  # 100 utterances spread over the intents
    shuffled = random.Random(0).sample(texts, 320)  # 10 batches of 32, mixed intents
    batches = [shuffled[i:i + 32] for i in range(0, len(shuffled), 32)]
    one = Classifier(path, threads=1)
    all_threads = Classifier(path, threads=os.cpu_count() or 1)
    return {
        "batch1_threads1": time_batches(one, singles, rounds),
        "batch32_threads1": time_batches(one, batches, rounds),
        f"batch32_threads{os.cpu_count()}": time_batches(all_threads, batches, rounds),
    }


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cpu_name() -> str:
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    args = parse_args()
    rows = read_jsonl(PREPARED_DIR / "test.jsonl")
    results = {}
    for name, path in VARIANTS.items():
        t0 = time.time()
        clf = Classifier(path, threads=os.cpu_count() or 1)
        results[name] = {
            "path": str(path.relative_to(MODELS_DIR)),
            "size_bytes": path.stat().st_size,
            "test": accuracy(clf, rows),
            "sanity": sanity(clf),
            "latency": latency(path, rows, args.latency_rounds),
        }
        acc = results[name]["test"]["accuracy"]
        ok = sum(s["ok"] for s in results[name]["sanity"])
        print(f"evaluate: {name} accuracy {acc:.2%}, sanity {ok}/{len(SANITY_QUERIES)}, "
              f"batch1/1 thread p50 {results[name]['latency']['batch1_threads1']['p50_ms']} ms "
              f"({time.time() - t0:.0f} s)", flush=True)

    report = {
        "model": "snips-minilm-l6",
        "labels": LABELS,
        "data": json.loads((PREPARED_DIR / "counts.json").read_text(encoding="utf-8")),
        "training": json.loads((CHECKPOINT_DIR / "train_meta.json").read_text(encoding="utf-8")),
        "variants": results,
        "committed_files": {name: {"size_bytes": (OUT_DIR / name).stat().st_size,
                                   "sha256": sha256(OUT_DIR / name)} for name in COMMITTED},
        "environment": {
            "machine": f"{os.cpu_count()} cores, {cpu_name()}",
            "python": platform.python_version(),
            "onnxruntime": ort.__version__,
            "onnx": onnx.__version__,
            "numpy": np.__version__,
            "tokenizers": tokenizers.__version__,
            "opset": next(o.version for o in onnx.load(str(VARIANTS["fp32"])).opset_import
                          if o.domain in ("", "ai.onnx")),
        },
    }
    write_json(OUT_DIR / "eval.json", report)

    int8 = results["int8"]
    failed = [s for s in int8["sanity"] if not s["ok"]]
    if int8["test"]["accuracy"] < args.min_int8_accuracy or failed:
        sys.exit(f"evaluate: int8 below target ({int8['test']['accuracy']:.2%} < "
                 f"{args.min_int8_accuracy:.0%}) or sanity failures {failed}")
    print(f"evaluate: wrote {OUT_DIR / 'eval.json'}")


if __name__ == "__main__":
    main()
