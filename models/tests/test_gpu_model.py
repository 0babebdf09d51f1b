"""The GPU model made from the committed int8 model (gpu_model.py), checked on the CPU.

Run by scripts/test.sh: `$(models/venv.sh) -m pytest models/tests`. One conversion is shared by
the tests (about 10 s); the answer check runs four models over the 700 test utterances (about
40 s on one core).
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import check_worker
import gpu_model
from answers import CpuModel, compare, failures, snips_test_set
from common import LABELS, OUT_DIR
from graph import dequantize


@pytest.fixture(scope="module")
def int8() -> onnx.ModelProto:
    return onnx.load(str(OUT_DIR / "model.onnx"))


@pytest.fixture(scope="module")
def conv(int8) -> dict:
    return gpu_model.convert(int8)


@pytest.fixture(scope="module")
def checked(int8, conv) -> tuple[list[str], list[str], dict]:
    return gpu_model.check(int8, conv, threads=1)


def test_every_quantized_op_is_rewritten_and_every_fusion_found(int8, conv):
    assert conv["rewrites"] == {"MatMulInteger": 38, "Gather": 3}
    assert gpu_model.structure_failures(int8, conv) == []


def test_dequantized_weights_are_exactly_the_int8_ones(int8, conv):
    """(W_q - W_zp) * W_scale, per output channel: dividing back gives the int8 values."""
    q = {t.name: numpy_helper.to_array(t) for t in int8.graph.initializer}
    f = {t.name: numpy_helper.to_array(t) for t in conv["float"].graph.initializer}
    name = "model.classifier.weight"
    back = f[name + "_dequantized"] / q[name + "_scale"] + q[name + "_zero_point"]
    np.testing.assert_array_equal(np.rint(back).astype(np.int8), q[name + "_quantized"])
    assert np.abs(back - np.rint(back)).max() < 1e-3
    emb = "model.bert.embeddings.word_embeddings.weight"
    back = f[emb] / q[emb + "_scale"] + q[emb + "_zero_point"]
    np.testing.assert_array_equal(np.rint(back).astype(np.uint8), q[emb + "_quantized"])


def test_fp16_and_every_step_answer_like_the_int8_model_on_cpu(checked):
    lines, bad, probs = checked
    print("\n".join(lines))
    assert bad == []
    gold = [LABELS.index(label) for _, label in snips_test_set()]
    assert (probs["fp16"].argmax(-1) == probs["int8"].argmax(-1)).all()
    assert (probs["fp16"].argmax(-1) == gold).sum() >= 686  # 98 %


def test_the_answer_check_fails_on_a_damaged_model(int8):
    """Two classifier columns swapped (two labels' names exchanged): the check must say so."""
    model, _ = dequantize(int8)
    w = next(t for t in model.graph.initializer if t.name == "model.classifier.weight_dequantized")
    arr = numpy_helper.to_array(w).copy()
    arr[:, [2, 3]] = arr[:, [3, 2]]
    w.CopyFrom(numpy_helper.from_array(arr, w.name))
    rows = snips_test_set()[::7]  # 100 utterances, all intents
    texts = [t for t, _ in rows]
    ref = CpuModel(int8.SerializeToString()).probabilities(texts)
    got = CpuModel(model.SerializeToString()).probabilities(texts)
    bad = failures(compare("damaged", ref, got, rows), tol=0.25, mean_tol=0.01)
    assert any("different intent" in b for b in bad), bad


def test_written_folder_is_what_the_worker_and_check_worker_read(tmp_path, conv, checked):
    _, _, probs = checked
    out = tmp_path / "gpu"
    gpu_model.write(out, conv["fp16"], probs)
    assert sorted(p.name for p in out.iterdir()) == ["answers.json", "config.json", "model.onnx",
                                                     "tokenizer.json"]
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert [config["id2label"][str(i)] for i in range(len(LABELS))] == LABELS
    answers = json.loads((out / "answers.json").read_text(encoding="utf-8"))
    rows, labels, tol = answers["rows"], answers["labels"], answers["tolerance_vs_fp16_cpu"]
    assert len(rows) == 700 and labels == LABELS

    def worker_answers(key, shift=0.0):
        out = []
        for r in rows:
            p = list(r[key])
            p[0] += shift
            best = max(range(len(labels)), key=lambda i: r[key][i])
            out.append({"intent": labels[best], "scores": dict(zip(labels, p))})
        return out

    # A worker answering like the fp16 model on CPU passes; one off by more than the tolerance,
    # or answering like the int8 model (up to 0.15 away), fails.
    assert check_worker.judge("fp16", rows, worker_answers("fp16_cpu"), labels, tol) == []
    assert check_worker.judge("shifted", rows, worker_answers("fp16_cpu", 2 * tol), labels, tol)
    assert check_worker.judge("int8", rows, worker_answers("int8"), labels, tol)
