"""CPU models side by side: accuracy on the 700 SNIPS test utterances and sequences per second
on one core, for two or more ONNX models, each in a bare ONNX Runtime session.

    python benches/model_cpu.py NAME=MODEL.onnx NAME=MODEL.onnx [--runs 5] [--seconds 3]
                                [--batches 1,8,32]

Run it pinned to one core (`taskset -c 1`, as benches/model_cpu.sh does). Each session has one
intra-op thread and one inter-op thread, ONNX Runtime's default graph optimizations (all, as in
the worker). Query mix: the test utterances in the load generator's order (shuffled with seed 0,
as benches/lib/queries.py), tokenized with the committed tokenizer, cut into consecutive batches
of B rows, each padded to its longest row (what the worker does on CPU); tokenization is not
timed. Every run cycles over the batches for about `--seconds` of each model's time per batch
size, each batch run by every model in turn (rotating which goes first), so that interference on
a shared machine falls on all models alike. Reports per model and batch size:

* seq/CPU-s: sequences per second of the thread's CPU time inside `run` (one intra-op thread:
  ONNX Runtime computes on the calling thread), i.e. one core's throughput; other processes
  taking the core do not lower it, though they still cost cache;
* seq/s: sequences per second of wall time inside `run` (what the pinned core delivered,
  interference included).

Ranges are min-max over the runs; the ratio column is computed within each run (same minutes).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "models" / "scripts"))
from answers import CpuModel  # noqa: E402
from common import DATA_DIR, LABELS, utterances  # noqa: E402


def query_mix() -> list[tuple[str, str]]:
    """(intent, text) in benches/lib/queries.py's order."""
    rows = [(intent, text.strip()) for intent in LABELS
            for text in utterances(DATA_DIR / f"validate_{intent}.json", intent) if text.strip()]
    random.Random(0).shuffle(rows)
    return rows


def time_models(models: dict[str, CpuModel], feeds: list[dict], rows: int, seconds: float):
    """Interleaved: each batch is run by every model in turn (the order rotating), so that
    interference from other processes falls on all of them alike. Returns, per model,
    (sequences per CPU-second, sequences per wall-second) over about `seconds` of its own calls."""
    names = list(models)
    for m in models.values():  # warm-up: the first runs of a shape allocate
        for f in feeds[:3]:
            m.sess.run(["logits"], f)
    cpu = dict.fromkeys(names, 0.0)
    wall = dict.fromkeys(names, 0.0)
    n, i = 0, 0
    while min(wall.values()) < seconds:
        f = feeds[i % len(feeds)]
        for k in range(len(names)):
            name = names[(i + k) % len(names)]
            t0, c0 = time.perf_counter(), time.thread_time()
            models[name].sess.run(["logits"], f)
            cpu[name] += time.thread_time() - c0
            wall[name] += time.perf_counter() - t0
        n += rows
        i += 1
    return {name: (n / cpu[name], n / wall[name]) for name in names}


def rng(xs: list[float], fmt: str = "{:.0f}") -> str:
    lo, hi = min(xs), max(xs)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else f"{fmt.format(lo)}-{fmt.format(hi)}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("models", nargs="+", help="NAME=PATH of an ONNX model; the first is the baseline")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--seconds", type=float, default=3.0, help="timed seconds per model, batch size and run")
    p.add_argument("--batches", default="1,8,32")
    args = p.parse_args()
    specs = [m.split("=", 1) for m in args.models]
    sizes = [int(b) for b in args.batches.split(",")]
    models = {name: CpuModel(Path(path).read_bytes(), threads=1) for name, path in specs}
    names = list(models)
    base = names[0]

    mix = query_mix()
    texts = [t for _, t in mix]
    gold = np.array([LABELS.index(i) for i, _ in mix])
    print(f"{len(texts)} utterances; models: " + ", ".join(f"{n}={p}" for n, p in specs))
    print("\n## Accuracy (batches of 32 in the mix's order)\n")
    print("| model | correct | accuracy | same intent as " + base + " | largest probability difference |")
    print("| --- | ---: | ---: | ---: | ---: |")
    probs = {n: m.probabilities(texts) for n, m in models.items()}
    for n in names:
        pred = probs[n].argmax(-1)
        same = int((pred == probs[base].argmax(-1)).sum())
        diff = float(np.abs(probs[n] - probs[base]).max())
        print(f"| {n} | {int((pred == gold).sum())}/{len(texts)} | {(pred == gold).mean():.1%} "
              f"| {same}/{len(texts)} | {diff:.3f} |")

    feeds = {b: [models[base].feeds(texts[i:i + b]) for i in range(0, len(texts) - b + 1, b)]
             for b in sizes}
    for b in sizes:
        tokens = [int(f["input_ids"].shape[1]) for f in feeds[b]]
        real = sum(int(f["attention_mask"].sum()) for f in feeds[b])
        print(f"\nbatch {b}: {len(feeds[b])} batches, padded length mean {np.mean(tokens):.1f} "
              f"(max {max(tokens)}), real tokens per row {real / (len(feeds[b]) * b):.1f}")

    cpu = {(n, b): [] for n in names for b in sizes}
    wall = {(n, b): [] for n in names for b in sizes}
    print("\n## Runs\n")
    print("| run | batch | " + " | ".join(f"{n} seq/CPU-s | {n} seq/s" for n in names) + " |")
    print("| ---: | ---: | " + " | ".join("---: | ---:" for _ in names) + " |")
    for r in range(args.runs):
        for b in sizes:
            got = time_models(models, feeds[b], b, args.seconds)
            for n in names:
                cpu[(n, b)].append(got[n][0])
                wall[(n, b)].append(got[n][1])
            print(f"| {r + 1} | {b} | " + " | ".join(f"{got[n][0]:.1f} | {got[n][1]:.1f}" for n in names)
                  + " |", flush=True)

    print(f"\n## Summary: {args.runs} runs, one core, min-max\n")
    others = names[1:]
    print("| batch | " + " | ".join(f"{n} seq/CPU-s" for n in names) + " | "
          + " | ".join(f"{n}/{base} (CPU)" for n in others) + " | "
          + " | ".join(f"{n} seq/s" for n in names) + " |")
    print("| ---: | " + " | ".join("---:" for _ in names) + " | " + " | ".join("---:" for _ in others)
          + " | " + " | ".join("---:" for _ in names) + " |")
    for b in sizes:
        ratios = [[c / a for c, a in zip(cpu[(n, b)], cpu[(base, b)])] for n in others]
        print(f"| {b} | " + " | ".join(rng(cpu[(n, b)]) for n in names) + " | "
              + " | ".join(rng(x, "{:.2f}x") for x in ratios) + " | "
              + " | ".join(rng(wall[(n, b)]) for n in names) + " |")


if __name__ == "__main__":
    main()
