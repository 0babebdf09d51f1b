"""Prepare the data and the tokenizer.

Reads `models/data/snips/`, writes `build/prepared/{train,test}.jsonl`
(one `{"text", "label"}` per line, labels as names) and the committed
`snips-minilm-l6/tokenizer.json` (the base model's, with padding removed and
truncation at 128 tokens).
"""

from __future__ import annotations

import json
import sys

from common import (
    DATA_DIR,
    EXPECTED_TEST,
    EXPECTED_TRAIN,
    LABELS,
    OUT_DIR,
    PREPARED_DIR,
    base_model_dir,
    utterances,
    write_json,
)

TOKENIZER_MAX_LENGTH = 128


def write_split(name: str, rows: list[dict]) -> None:
    PREPARED_DIR.mkdir(parents=True, exist_ok=True)
    with (PREPARED_DIR / f"{name}.jsonl").open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def prepare_data() -> dict:
    train, test = [], []
    for label in LABELS:
        train += [{"text": t.strip(), "label": label}
                  for t in utterances(DATA_DIR / f"train_{label}_full.json", label)]
        test += [{"text": t.strip(), "label": label}
                 for t in utterances(DATA_DIR / f"validate_{label}.json", label)]
    if len(train) != EXPECTED_TRAIN or len(test) != EXPECTED_TEST:
        sys.exit(f"unexpected counts: train {len(train)} (want {EXPECTED_TRAIN}), "
                 f"test {len(test)} (want {EXPECTED_TEST})")
    write_split("train", train)
    write_split("test", test)
    train_texts = {r["text"] for r in train}
    counts = {
        "train": len(train),
        "test": len(test),
        "train_per_intent": {l: sum(r["label"] == l for r in train) for l in LABELS},
        "test_per_intent": {l: sum(r["label"] == l for r in test) for l in LABELS},
        "test_also_in_train": sum(r["text"] in train_texts for r in test),
    }
    write_json(PREPARED_DIR / "counts.json", counts)
    return counts


def prepare_tokenizer() -> None:
    tok = json.loads((base_model_dir() / "tokenizer.json").read_text(encoding="utf-8"))
    tok["padding"] = None  # the runtime pads each batch to its longest row
    tok["truncation"] = {
        "direction": "Right",
        "max_length": TOKENIZER_MAX_LENGTH,
        "strategy": "LongestFirst",
        "stride": 0,
    }
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    # Written compactly, like the upstream file; keys stay in their original order.
    (OUT_DIR / "tokenizer.json").write_text(
        json.dumps(tok, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")


def main() -> None:
    counts = prepare_data()
    prepare_tokenizer()
    print(f"prepare: train {counts['train']}, test {counts['test']} "
          f"({counts['test_also_in_train']} test utterances also occur in train); "
          f"tokenizer -> {OUT_DIR / 'tokenizer.json'}")


if __name__ == "__main__":
    main()
