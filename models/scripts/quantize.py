"""Derive the int8 and fp16 variants from the fp32 ONNX model.

- int8: `quantize_dynamic` (QInt8 weights with per-channel scales, activations
  quantized at run time), written to the committed `snips-minilm-l6/model.onnx`,
  for CPU. Per-tensor scales lost 0.3 points on the test set (98.1 % against
  98.4 % for fp32); per-channel scales keep the fp32 accuracy for +0.1 MB.
  Quantizing after the BERT fusions instead (QAttention) answers the same but is not
  faster on one core (0.91-0.96x at batches of 8-32, `benches/model_cpu.sh`), so the
  unfused graph is quantized: ONNX Runtime fuses most of it itself when it loads it.
- fp16: ONNX Runtime's BERT fusions (`optimize_model`, model_type "bert"), then
  `convert_float_to_float16(keep_io_types=True)` so the inputs stay int64 and
  `logits` stays float32; written with tokenizer and config to
  `build/snips-minilm-l6-fp16/`.
"""

from __future__ import annotations

import shutil

from common import FP16_DIR, FP32_DIR, OUT_DIR

import onnx  # noqa: E402
from onnxruntime.quantization import QuantType, quantize_dynamic  # noqa: E402
from onnxruntime.transformers.optimizer import optimize_model  # noqa: E402

NUM_HEADS = 12
HIDDEN_SIZE = 384


def io_signature(path) -> list[tuple]:
    """(name, element type, dims) of every graph input and output."""
    model = onnx.load(str(path), load_external_data=False)
    sig = []
    for value in list(model.graph.input) + list(model.graph.output):
        t = value.type.tensor_type
        dims = tuple(d.dim_param or d.dim_value for d in t.shape.dim)
        sig.append((value.name, onnx.TensorProto.DataType.Name(t.elem_type), dims))
    return sig


def quantize_int8() -> None:
    dst = OUT_DIR / "model.onnx"
    quantize_dynamic(str(FP32_DIR / "model.onnx"), str(dst), weight_type=QuantType.QInt8,
                     per_channel=True)
    print(f"quantize: int8 -> {dst} ({dst.stat().st_size / 1e6:.1f} MB)")


def convert_fp16() -> None:
    FP16_DIR.mkdir(parents=True, exist_ok=True)
    opt = optimize_model(str(FP32_DIR / "model.onnx"), model_type="bert",
                         num_heads=NUM_HEADS, hidden_size=HIDDEN_SIZE)
    fused = opt.get_fused_operator_statistics()
    opt.convert_float_to_float16(keep_io_types=True)
    dst = FP16_DIR / "model.onnx"
    opt.save_model_to_file(str(dst))
    for name in ("tokenizer.json", "config.json"):
        shutil.copy2(FP32_DIR / name, FP16_DIR / name)
    print(f"quantize: fp16 -> {dst} ({dst.stat().st_size / 1e6:.1f} MB); fused ops "
          f"{ {k: v for k, v in fused.items() if v} }")


def main() -> None:
    quantize_int8()
    convert_fp16()
    want = io_signature(FP32_DIR / "model.onnx")
    for path in (OUT_DIR / "model.onnx", FP16_DIR / "model.onnx"):
        got = io_signature(path)
        if got != want:
            raise SystemExit(f"{path}: inputs/outputs {got} differ from fp32 {want}")
    print(f"quantize: all variants keep the signature {want}")


if __name__ == "__main__":
    main()
