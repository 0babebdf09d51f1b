"""Export the fine-tuned checkpoint to ONNX (fp32).

Writes `build/snips-minilm-l6-fp32/{model.onnx,tokenizer.json,config.json}`
and the committed `snips-minilm-l6/config.json` (label map). Inputs
`input_ids`, `attention_mask`, `token_type_ids` (int64, [batch, sequence]),
output `logits` (float32, [batch, num_labels]); batch and sequence are dynamic.
Uses the TorchScript exporter (`dynamo=False`).
"""

from __future__ import annotations

import json
import shutil

from common import CHECKPOINT_DIR, FP32_DIR, LABELS, OUT_DIR, offline, write_json

offline()

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForSequenceClassification  # noqa: E402

OPSET = 17
INPUTS = ["input_ids", "attention_mask", "token_type_ids"]


class LogitsOnly(torch.nn.Module):
    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).logits


def write_config() -> None:
    """The HF config of the checkpoint, with the label map in alphabetical order."""
    config = json.loads((CHECKPOINT_DIR / "config.json").read_text(encoding="utf-8"))
    config.pop("_name_or_path", None)
    assert config["architectures"] == ["BertForSequenceClassification"], config["architectures"]
    assert config["model_type"] == "bert"
    config["id2label"] = {str(i): label for i, label in enumerate(LABELS)}
    config["label2id"] = {label: i for i, label in enumerate(LABELS)}
    config["num_labels"] = len(LABELS)
    for path in (OUT_DIR / "config.json", FP32_DIR / "config.json"):
        write_json(path, dict(sorted(config.items())))


def main() -> None:
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(
        CHECKPOINT_DIR, attn_implementation="eager").eval()
    wrapper = LogitsOnly(model).eval()

    FP32_DIR.mkdir(parents=True, exist_ok=True)
    path = FP32_DIR / "model.onnx"
    dummy = (
        torch.randint(1000, 2000, (2, 8), dtype=torch.long),
        torch.ones(2, 8, dtype=torch.long),
        torch.zeros(2, 8, dtype=torch.long),
    )
    axes = {name: {0: "batch", 1: "sequence"} for name in INPUTS}
    axes["logits"] = {0: "batch"}
    with torch.no_grad():
        torch.onnx.export(
            wrapper, dummy, str(path),
            input_names=INPUTS, output_names=["logits"], dynamic_axes=axes,
            opset_version=OPSET, do_constant_folding=True, dynamo=False,
        )
    onnx.checker.check_model(str(path))

    shutil.copy2(OUT_DIR / "tokenizer.json", FP32_DIR / "tokenizer.json")
    write_config()

    # Parity with PyTorch on a padded batch of another shape than the dummy.
    ids = torch.randint(1000, 5000, (3, 13), dtype=torch.long)
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    types = torch.zeros_like(ids)
    with torch.no_grad():
        ref = wrapper(ids, mask, types).numpy()
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = sess.run(["logits"], {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
                                "token_type_ids": types.numpy()})[0]
    diff = float(np.abs(ref - got).max())
    if diff > 1e-3:
        raise SystemExit(f"export: ONNX and PyTorch disagree, max |diff| {diff}")
    print(f"export: {path} (opset {OPSET}), max |diff| vs PyTorch {diff:.2e}")


if __name__ == "__main__":
    main()
