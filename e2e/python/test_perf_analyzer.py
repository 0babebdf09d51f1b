"""Triton's perf_analyzer, the load generator Triton users measure a server with, against the
worker and the gateway over HTTP (its binary tensor data) and gRPC: it reads the model's
metadata and configuration, sends, and measures without an error."""

import re
import subprocess

import pytest

from conftest import MODEL, ROOT


@pytest.fixture(scope="session")
def perf_analyzer():
    made = subprocess.run([str(ROOT / "e2e" / "python" / "perf_analyzer.sh")], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.fail(f"e2e/python/perf_analyzer.sh failed:\n{made.stderr}")
    return made.stdout.strip()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_measures_the_model(perf_analyzer, server, protocol):
    # Three texts a request (the input's shape [-1] made [3]), two requests at a time, a window
    # of 30 requests; any window will do (stability is not what this checks).
    args = [perf_analyzer, "-m", MODEL, "-u", server.hostport("grpc" if protocol == "grpc" else ""),
            "-i", protocol, "--shape", "text:3", "--string-length", "16", "--concurrency-range", "2",
            "--measurement-mode", "count_windows", "--measurement-request-count", "30",
            "--stability-percentage", "1000", "--max-trials", "3"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "error" not in text.lower(), text
    throughput = re.search(r"Throughput: ([0-9.]+) infer/sec", text)
    assert throughput and float(throughput.group(1)) > 0, text
