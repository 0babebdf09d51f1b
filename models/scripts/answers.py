"""A model's answers on the 700 SNIPS test utterances (ONNX Runtime, CPU), and the comparisons
that decide whether a converted model still answers like the committed int8 one.

Tolerances (largest difference of any class probability on any utterance, unless said otherwise),
each with the figure measured when they were set (onnxruntime 1.31.1, this repository's models):

* float (dequantized) graph vs the committed int8 model: the same intent on all 700 utterances;
  max 0.25 (measured 0.150); mean over utterances of the per-utterance max 0.01 (measured 0.0025).
  The int8 model quantizes activations at run time, the float graph does not: the two differ by
  that rounding, most on the few utterances the model is unsure of (the 0.150 is
  "Live In L.aJoseph Meyer please", p 0.54 against 0.69; both PlayMusic).
* BERT-fused float graph vs the unfused float graph: max 1e-4 (measured 7e-7): fusion only
  regroups the arithmetic.
* fp16 vs the fused float graph, both on CPU: max 0.01 (measured 6e-4).
* a worker serving the fp16 model on a GPU vs the fp16 model on CPU: max 0.02 (see
  `check_worker.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from common import DATA_DIR, LABELS, OUT_DIR, utterances

TOL_FLOAT_VS_INT8 = 0.25
TOL_FLOAT_VS_INT8_MEAN = 0.01
TOL_FUSED_VS_FLOAT = 1e-4
TOL_FP16_VS_FLOAT = 0.01
TOL_GPU_VS_FP16_CPU = 0.02
MIN_ACCURACY = 0.98


def snips_test_set() -> list[tuple[str, str]]:
    """(text, intent) of the 700 test utterances, stripped, in file order (as `prepare.py`)."""
    return [(t.strip(), label) for label in LABELS
            for t in utterances(DATA_DIR / f"validate_{label}.json", label)]


class CpuModel:
    """One ONNX Runtime CPU session on a model (a path or serialized bytes), with the committed
    tokenizer; batches are padded to their longest row, as the worker does on CPU."""

    def __init__(self, model, threads: int = 1):
        import onnxruntime as ort
        import tokenizers

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        self.sess = ort.InferenceSession(model if isinstance(model, bytes) else str(model), opts,
                                         providers=["CPUExecutionProvider"])
        self.tok = tokenizers.Tokenizer.from_file(str(OUT_DIR / "tokenizer.json"))
        self.tok.enable_padding(pad_id=0, pad_token="[PAD]")

    def feeds(self, texts: list[str]) -> dict[str, np.ndarray]:
        enc = self.tok.encode_batch(texts)
        return {
            "input_ids": np.array([e.ids for e in enc], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in enc], dtype=np.int64),
        }

    def probabilities(self, texts: list[str], batch: int = 32) -> np.ndarray:
        out = []
        for i in range(0, len(texts), batch):
            logits = self.sess.run(["logits"], self.feeds(texts[i:i + batch]))[0]
            out.append(logits.astype(np.float64))
        logits = np.concatenate(out)
        p = np.exp(logits - logits.max(-1, keepdims=True))
        return p / p.sum(-1, keepdims=True)


@dataclass
class Comparison:
    """How `got` answers against `ref` on the same utterances."""

    name: str
    same_intent: int
    total: int
    max_diff: float
    mean_max_diff: float
    worst: str  # the utterance with the largest difference
    correct: int

    def line(self) -> str:
        return (f"{self.name}: same intent {self.same_intent}/{self.total}, accuracy "
                f"{self.correct}/{self.total}, largest probability difference {self.max_diff:.2e} "
                f"(mean per utterance {self.mean_max_diff:.2e}; worst: {self.worst!r})")


def compare(name: str, ref: np.ndarray, got: np.ndarray, rows: list[tuple[str, str]]) -> Comparison:
    diff = np.abs(ref - got).max(-1)
    gold = np.array([LABELS.index(label) for _, label in rows])
    worst = int(diff.argmax())
    return Comparison(name=name, same_intent=int((ref.argmax(-1) == got.argmax(-1)).sum()),
                      total=len(rows), max_diff=float(diff.max()),
                      mean_max_diff=float(diff.mean()), worst=rows[worst][0],
                      correct=int((got.argmax(-1) == gold).sum()))


def failures(c: Comparison, tol: float, mean_tol: float | None = None) -> list[str]:
    """Why `c` fails its tolerances (empty when it passes)."""
    bad = []
    if c.same_intent != c.total:
        bad.append(f"{c.name}: a different intent on {c.total - c.same_intent} of {c.total}")
    if c.max_diff > tol:
        bad.append(f"{c.name}: probability differs by {c.max_diff:.3g} > {tol} on {c.worst!r}")
    if mean_tol is not None and c.mean_max_diff > mean_tol:
        bad.append(f"{c.name}: mean difference {c.mean_max_diff:.3g} > {mean_tol}")
    if c.correct < MIN_ACCURACY * c.total:
        bad.append(f"{c.name}: accuracy {c.correct}/{c.total} below {MIN_ACCURACY:.0%}")
    return bad
