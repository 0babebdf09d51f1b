"""Python baseline for benches/worker_vs_python.sh: the same model behind an ordinary Python web server.

What a typical Python inference service looks like, with nothing tuned beyond the thread count:

* ONNX Runtime 1.31.1 `InferenceSession` on the same `model.onnx`, CPU execution provider,
  `intra_op_num_threads` = `--threads` (the worker's `--threads`), `inter_op_num_threads` = 1,
  default graph optimisations (ORT_ENABLE_ALL);
* the Hugging Face `tokenizers` package loading the same `tokenizer.json` (truncation at 128, no padding);
* FastAPI on uvicorn (uvloop + httptools, i.e. `uvicorn[standard]`), one process, access log off
  (the worker does not log each request either);
* one request = one inference (batch of one, no dynamic batching).

Handler styles (`--handler`):

* `sync` (default): a plain `def` endpoint, which FastAPI runs in its thread pool (anyio, 40
  threads) -- the style FastAPI's documentation recommends for blocking code. ONNX Runtime and
  `tokenizers` release the GIL, so several requests may be inside `session.run` at once.
* `async`: an `async def` endpoint that calls the model on the event loop: requests run strictly
  one after another, with no thread hand-off.

API, as the worker's: `GET /predict?query=...` and `POST /predict` `{"query": "..."}` ->
`{"intent": "PlayMusic", "score": 0.98}`; `GET /healthz`. Prints `listening on http://ADDR` once
bound (`--port 0` picks a free port).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import uvicorn  # noqa: E402
from fastapi import Body, FastAPI, HTTPException, Query  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402


class Classifier:
    def __init__(self, model_dir: Path, threads: int) -> None:
        config = json.loads((model_dir / "config.json").read_text())
        id2label = config["id2label"]
        self.labels = [id2label[str(i)] for i in range(len(id2label))]
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        opts = ort.SessionOptions()
        if threads > 0:
            opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        self.session = ort.InferenceSession(
            str(model_dir / "model.onnx"), sess_options=opts, providers=["CPUExecutionProvider"]
        )
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.output = next((o.name for o in self.session.get_outputs() if o.name == "logits"),
                           self.session.get_outputs()[0].name)

    def predict(self, query: str) -> dict:
        enc = self.tokenizer.encode(query)
        feeds = {}
        for name in self.inputs:
            if name == "input_ids":
                feeds[name] = np.asarray([enc.ids], dtype=np.int64)
            elif name == "attention_mask":
                feeds[name] = np.asarray([enc.attention_mask], dtype=np.int64)
            elif name == "token_type_ids":
                feeds[name] = np.asarray([enc.type_ids], dtype=np.int64)
            else:
                raise RuntimeError(f"unexpected model input {name!r}")
        (logits,) = self.session.run([self.output], feeds)
        row = logits[0].astype(np.float64)
        probs = np.exp(row - row.max())
        probs /= probs.sum()
        best = int(probs.argmax())
        return {"intent": self.labels[best], "score": float(probs[best])}


def build_app(clf: Classifier, handler: str) -> FastAPI:
    app = FastAPI(title="python-baseline", docs_url=None, redoc_url=None, openapi_url=None)

    def check(query: str | None) -> str:
        if query is None or not query.strip():
            raise HTTPException(status_code=400, detail="missing or empty `query`")
        return query

    if handler == "sync":
        @app.get("/predict")
        def predict_get(query: str | None = Query(default=None)) -> dict:
            return clf.predict(check(query))

        @app.post("/predict")
        def predict_post(body: dict = Body(...)) -> dict:
            return clf.predict(check(body.get("query")))
    else:
        @app.get("/predict")
        async def predict_get(query: str | None = Query(default=None)) -> dict:
            return clf.predict(check(query))

        @app.post("/predict")
        async def predict_post(body: dict = Body(...)) -> dict:
            return clf.predict(check(body.get("query")))

    @app.get("/healthz")
    async def healthz() -> dict:
        return {"status": "alive"}

    return app


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, default=Path("models/snips-minilm-l6"))
    p.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--handler", choices=["sync", "async"], default="sync")
    args = p.parse_args()

    clf = Classifier(args.model, args.threads)
    clf.predict("warm up")
    app = build_app(clf, args.handler)

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    sock.listen(2048)
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(app, access_log=False, log_level="warning", loop="uvloop", http="httptools",
                            backlog=2048)
    server = uvicorn.Server(config)
    print(f"listening on http://{host}:{port}", flush=True)
    print(f"python-baseline: onnxruntime {ort.__version__}, threads {args.threads}, handler {args.handler}",
          file=sys.stderr, flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
