"""Make the GPU model (fp16, ONNX Runtime BERT fusions) from the committed int8 model, and check it.

    python models/scripts/gpu_model.py [--out models/build/gpu] [--threads N]

Steps (seconds, no PyTorch, no retraining; see `graph.py`): dequantize the committed
`snips-minilm-l6/model.onnx` into a float graph, apply ONNX Runtime's BERT fusions, convert to
fp16 keeping int64 inputs and float32 `logits`. Then run the committed int8 model and every
intermediate on the 700 SNIPS test utterances with ONNX Runtime's CPU provider and compare, with
the tolerances of `answers.py`: the same intent as the int8 model on every utterance, and
probabilities within tolerance at each step. Exits 1, writing nothing, if any check fails.

Writes OUT/model.onnx, OUT/tokenizer.json and OUT/config.json (what the worker loads:
`worker --model OUT --device cuda:0`), and OUT/answers.json: the int8 and fp16 (CPU)
probabilities per utterance, which `check_worker.py` compares a running worker's answers with.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from answers import (
    TOL_FLOAT_VS_INT8,
    TOL_FLOAT_VS_INT8_MEAN,
    TOL_FP16_VS_FLOAT,
    TOL_FUSED_VS_FLOAT,
    TOL_GPU_VS_FP16_CPU,
    CpuModel,
    compare,
    failures,
    snips_test_set,
)
from common import BUILD_DIR, LABELS, OUT_DIR
from graph import dequantize, fuse_bert, io_signature, to_fp16

import onnx  # noqa: E402
from onnx import TensorProto  # noqa: E402

GPU_DIR = BUILD_DIR / "gpu"
# What ONNX Runtime's BERT fusions must find in this 6-layer model.
EXPECTED_FUSED = {"EmbedLayerNormalization": 1, "Attention": 6, "SkipLayerNormalization": 12,
                  "BiasGelu": 6}
QUANTIZED_OPS = {"MatMulInteger", "DynamicQuantizeLinear", "DequantizeLinear", "QuantizeLinear"}


def convert(int8: onnx.ModelProto) -> dict:
    """The three graphs (float, fused float, fp16) and what the conversion found."""
    t0 = time.perf_counter()
    float_model, rewrites = dequantize(int8)
    fused, fused_ops = fuse_bert(float_model)
    fp16 = to_fp16(fused)
    return {"float": float_model, "fused": fused, "fp16": fp16, "rewrites": rewrites,
            "fused_ops": fused_ops, "seconds": time.perf_counter() - t0}


def structure_failures(int8: onnx.ModelProto, conv: dict) -> list[str]:
    """Checks that need no inference: every quantized op replaced, every fusion found, the same
    inputs and outputs, fp16 weights."""
    bad = []
    n_mmi = sum(n.op_type == "MatMulInteger" for n in int8.graph.node)
    n_deq = sum(n.op_type == "DequantizeLinear" for n in int8.graph.node)
    if conv["rewrites"] != {"MatMulInteger": n_mmi, "Gather": n_deq}:
        bad.append(f"rewrote {conv['rewrites']}, the int8 model has {n_mmi} MatMulInteger and "
                   f"{n_deq} DequantizeLinear")
    if conv["fused_ops"] != EXPECTED_FUSED:
        bad.append(f"fused operators {conv['fused_ops']}, expected {EXPECTED_FUSED}")
    want = io_signature(int8)
    for name in ("float", "fused", "fp16"):
        model = conv[name]
        if io_signature(model) != want:
            bad.append(f"{name}: inputs/outputs {io_signature(model)} differ from {want}")
        left = sorted({n.op_type for n in model.graph.node} & QUANTIZED_OPS)
        if left:
            bad.append(f"{name}: quantized operators left: {left}")
    types = {t.data_type for t in conv["fp16"].graph.initializer if len(t.dims) >= 2}
    if types != {TensorProto.FLOAT16}:
        bad.append(f"fp16: weight matrices of types {sorted(types)}, expected only FLOAT16")
    return bad


def check(int8: onnx.ModelProto, conv: dict, threads: int) -> tuple[list[str], list[str], dict]:
    """Runs all four graphs on the test set (CPU). Returns (report lines, failures, probs)."""
    rows = snips_test_set()
    texts = [t for t, _ in rows]
    probs = {}
    for name, model in (("int8", int8), ("float", conv["float"]), ("fused", conv["fused"]),
                        ("fp16", conv["fp16"])):
        probs[name] = CpuModel(model.SerializeToString(), threads).probabilities(texts)
    steps = [
        (compare("float vs int8", probs["int8"], probs["float"], rows),
         TOL_FLOAT_VS_INT8, TOL_FLOAT_VS_INT8_MEAN),
        (compare("fused vs float", probs["float"], probs["fused"], rows), TOL_FUSED_VS_FLOAT, None),
        (compare("fp16 vs fused", probs["fused"], probs["fp16"], rows), TOL_FP16_VS_FLOAT, None),
        (compare("fp16 vs int8", probs["int8"], probs["fp16"], rows),
         TOL_FLOAT_VS_INT8 + TOL_FP16_VS_FLOAT, None),
    ]
    lines = [c.line() for c, _, _ in steps]
    bad = [f for c, tol, mean in steps for f in failures(c, tol, mean)]
    return lines, bad, probs


def write(out: Path, fp16: onnx.ModelProto, probs: dict) -> None:
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    onnx.save(fp16, str(tmp / "model.onnx"))
    for name in ("tokenizer.json", "config.json"):
        shutil.copy2(OUT_DIR / name, tmp / name)
    rows = snips_test_set()
    answers = {
        "about": "Answers of the committed int8 model and of this fp16 model on the SNIPS test "
                 "set, ONNX Runtime CPU provider; read by models/scripts/check_worker.py",
        "labels": LABELS,
        "tolerance_vs_fp16_cpu": TOL_GPU_VS_FP16_CPU,
        "rows": [{"text": t, "label": label,
                  "int8": [round(float(x), 6) for x in probs["int8"][i]],
                  "fp16_cpu": [round(float(x), 6) for x in probs["fp16"][i]]}
                 for i, (t, label) in enumerate(rows)],
    }
    (tmp / "answers.json").write_text(json.dumps(answers, ensure_ascii=False) + "\n",
                                      encoding="utf-8")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path, default=GPU_DIR, help="output folder (default %(default)s)")
    p.add_argument("--threads", type=int, default=1,
                   help="ONNX Runtime CPU threads for the check (default %(default)s)")
    args = p.parse_args()

    t0 = time.perf_counter()
    int8 = onnx.load(str(OUT_DIR / "model.onnx"))
    conv = convert(int8)
    print(f"gpu_model: rewrote {conv['rewrites']['MatMulInteger']} MatMulInteger and "
          f"{conv['rewrites']['Gather']} quantized Gather as float; fused {conv['fused_ops']}; "
          f"fp16 ({conv['seconds']:.1f} s)", flush=True)
    bad = structure_failures(int8, conv)
    t1 = time.perf_counter()
    lines, bad_answers, probs = check(int8, conv, args.threads)
    for line in lines:
        print(f"gpu_model: {line}")
    print(f"gpu_model: checked on {len(probs['int8'])} test utterances, CPU provider "
          f"({time.perf_counter() - t1:.1f} s)")
    bad += bad_answers
    if bad:
        for b in bad:
            print(f"gpu_model: FAILED: {b}", file=sys.stderr)
        sys.exit(1)
    write(args.out, conv["fp16"], probs)
    size = (args.out / "model.onnx").stat().st_size / 1e6
    print(f"gpu_model: wrote {args.out}/model.onnx ({size:.1f} MB), tokenizer.json, config.json, "
          f"answers.json ({time.perf_counter() - t0:.1f} s in all)")


if __name__ == "__main__":
    main()
