"""The int8 CPU model quantized after ONNX Runtime's BERT fusions, made from the committed model.

    python models/scripts/fused_int8.py [--out models/build/fused-int8]

The committed `snips-minilm-l6/model.onnx` is `quantize_dynamic` (QInt8 weights, per-channel
scales) of the unfused graph. This script dequantizes it (`graph.dequantize`), applies the BERT
fusions (`graph.fuse_bert`: Attention, SkipLayerNormalization, EmbedLayerNormalization, BiasGelu)
and quantizes again with the same settings, which turns Attention into QAttention and
EmbedLayerNormalization into QEmbedLayerNormalization. Writes OUT/{model.onnx,tokenizer.json,
config.json}; `benches/model_cpu.sh` compares it with the committed model.

Why the dequantized graph is a faithful source (no retraining needed): quantizing it again
without fusions must give back the committed model, every int8 weight and every answer; the
script checks that first and fails otherwise. Quantization is per output channel and
symmetric, so fusing Q, K and V into one [384, 1152] weight keeps each column's scale.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from answers import CpuModel, compare, snips_test_set
from common import BUILD_DIR, OUT_DIR
from graph import dequantize, fuse_bert, op_counts

FUSED_INT8_DIR = BUILD_DIR / "fused-int8"


def quantize(model: onnx.ModelProto, tmp: Path, name: str) -> onnx.ModelProto:
    """`quantize_dynamic` with the committed model's settings (see quantize.py)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src, dst = tmp / f"{name}.onnx", tmp / f"{name}-int8.onnx"
    onnx.save(model, str(src))
    root = logging.getLogger()
    level, root.level = root.level, logging.ERROR  # its advice to run shape pre-processing
    try:
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=True)
    finally:
        root.setLevel(level)
    return onnx.load(str(dst))


def int8_weights(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Quantized initializers by the name of the float weight they came from."""
    out = {}
    for t in model.graph.initializer:
        if t.name.endswith("_quantized"):
            out[t.name.removesuffix("_quantized").removesuffix("_dequantized")] = numpy_helper.to_array(t)
    return out


def requantize_failures(int8: onnx.ModelProto, again: onnx.ModelProto) -> tuple[str, list[str]]:
    """Compares the committed model with the re-quantized unfused float graph."""
    a, b = int8_weights(int8), int8_weights(again)
    bad = [] if set(a) == set(b) else [f"quantized weights {sorted(set(a) ^ set(b))} differ in name"]
    total = sum(v.size for v in a.values())
    equal = sum(int((v == b[k]).sum()) for k, v in a.items() if k in b and b[k].shape == v.shape)
    if equal != total:
        bad.append(f"{total - equal} of {total} int8 weights differ")
    rows = snips_test_set()[::7]
    texts = [t for t, _ in rows]
    c = compare("re-quantized", CpuModel(int8.SerializeToString()).probabilities(texts),
                CpuModel(again.SerializeToString()).probabilities(texts), rows)
    if c.max_diff > 1e-6:
        bad.append(f"answers differ: {c.line()}")
    return (f"re-quantizing the unfused float graph gives back the committed model: {equal:,} of "
            f"{total:,} int8 weights equal, largest probability difference {c.max_diff:.1e} on "
            f"{len(rows)} utterances"), bad


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path, default=FUSED_INT8_DIR)
    args = p.parse_args()
    t0 = time.perf_counter()
    int8 = onnx.load(str(OUT_DIR / "model.onnx"))
    float_model, _ = dequantize(int8)
    fused, fused_ops = fuse_bert(float_model)
    with tempfile.TemporaryDirectory() as tmp:
        line, bad = requantize_failures(int8, quantize(float_model, Path(tmp), "unfused"))
        print(f"fused_int8: {line}")
        if bad:
            sys.exit("fused_int8: FAILED: " + "; ".join(bad))
        model = quantize(fused, Path(tmp), "fused")
    args.out.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(args.out / "model.onnx"))
    for name in ("tokenizer.json", "config.json"):
        shutil.copy2(OUT_DIR / name, args.out / name)
    ops = {k: v for k, v in op_counts(model).items() if k[0] == "Q" or "Quantize" in k
           or k == "MatMulInteger"}
    print(f"fused_int8: fused {fused_ops}; quantized ops {ops}; wrote {args.out}/model.onnx "
          f"({(args.out / 'model.onnx').stat().st_size / 1e6:.1f} MB, "
          f"{time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
