"""Starts the workspace's built binaries (target/debug/worker and gateway, or WORKER_BIN and
GATEWAY_BIN) on 127.0.0.1:0 and reads back their addresses from their `... listening on
http://ADDR` lines, as the Rust tests do (testkit::Server)."""

import json
import os
import pathlib
import subprocess
import threading
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL = "snips-minilm-l6"
START_LIMIT_S = 60


def binary(name):
    path = os.environ.get(f"{name.upper()}_BIN") or str(ROOT / "target" / "debug" / name)
    if not os.path.isfile(path):
        pytest.fail(f"{path} is missing: build it first (cargo build -p worker -p gateway)")
    return path


class Server:
    """A process whose `NAME listening on URL` lines are collected by NAME ("" for the plain one)."""

    def __init__(self, args):
        env = dict(os.environ, RUST_LOG="warn")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, env=env)
        self.urls = {}
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self.url = self.announced("")

    def _read(self):
        for line in self.proc.stdout:
            if "listening on " in line:
                name, url = line.split("listening on ", 1)
                with self.changed:
                    self.urls[name.strip()] = url.strip()
                    self.changed.notify_all()
        with self.changed:
            self.urls[None] = None
            self.changed.notify_all()

    def announced(self, name):
        deadline = time.monotonic() + START_LIMIT_S
        with self.changed:
            while name not in self.urls:
                left = deadline - time.monotonic()
                if None in self.urls or left <= 0:
                    pytest.fail(f"{self.proc.args} did not print `{name} listening on` (exit {self.proc.poll()})")
                self.changed.wait(left)
            return self.urls[name]

    def hostport(self, name=""):
        return self.announced(name).removeprefix("http://")

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def sanity():
    return json.loads((ROOT / "models" / "sanity.json").read_text())


@pytest.fixture(scope="session")
def worker():
    ort = os.environ.get("ORT_DYLIB_PATH")
    if not ort:
        pytest.fail("ORT_DYLIB_PATH is not set (scripts/test.sh sets it from scripts/fetch-ort.sh)")
    s = Server([binary("worker"), "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0",
                "--model", str(ROOT / "models" / MODEL), "--ort-lib", ort, "--intra-op-threads", "1"])
    yield s
    s.stop()


def start_gateway(*extra):
    return Server([binary("gateway"), "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
                   "--grpc-listen", "127.0.0.1:0", "--stats-interval", "100ms", "--probe-backoff", "100ms",
                   *extra])


@pytest.fixture(scope="session")
def gateway(worker):
    s = start_gateway("--worker", worker.url)
    yield s
    s.stop()


@pytest.fixture(params=["worker", "gateway"])
def server(request):
    """Each of the worker and the gateway in turn."""
    return request.getfixturevalue(request.param)


def wait_until(what, check, limit_s=30):
    deadline = time.monotonic() + limit_s
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting until {what}")
        time.sleep(0.02)
