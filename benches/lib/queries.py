"""Writes the SNIPS test utterances as the benchmark's query mix.

    python queries.py DATA_DIR OUT_DIR

Reads the test split, DATA_DIR/validate_<Intent>.json, with the model build's own reader
(`models/scripts/common.py`), and writes, in one fixed shuffled order (seed 0):

* OUT_DIR/paths.txt: `/predict?query=<url-encoded utterance>`, one a line (for wrk);
* OUT_DIR/utterances.jsonl: `{"intent": ..., "text": ...}`, one a line (for check.py).
"""

import json
import random
import sys
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "models" / "scripts"))
from common import LABELS, utterances  # noqa: E402


def main() -> None:
    data, out = Path(sys.argv[1]), Path(sys.argv[2])
    rows = [
        (intent, text.strip())
        for intent in LABELS
        for text in utterances(data / f"validate_{intent}.json", intent)
        if text.strip()
    ]
    if not rows:
        sys.exit(f"no utterances in {data}/validate_*.json")
    random.Random(0).shuffle(rows)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "paths.txt", "w", encoding="utf-8") as p, open(out / "utterances.jsonl", "w", encoding="utf-8") as u:
        for intent, text in rows:
            p.write("/predict?query=" + urllib.parse.quote(text, safe="") + "\n")
            u.write(json.dumps({"intent": intent, "text": text}) + "\n")
    print(f"{len(rows)} utterances from {data}")


if __name__ == "__main__":
    main()
