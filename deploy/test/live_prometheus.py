"""A real Prometheus (Debian's) scraping a real gateway and two real CPU workers:

    python live_prometheus.py --gateway BIN --worker BIN --ort LIB --model DIR --rules RULES --dashboard JSON

1. starts two workers and a gateway over them on 127.0.0.1:0, sends predictions through the
   gateway (and one bad request, so an error outcome exists);
2. `promtool check metrics` on each /metrics as a plain scraper reads it (Prometheus text 0.0.4),
   and checks that a scraper asking for OpenMetrics gets OpenMetrics;
3. starts `prometheus` on a free port scraping the three every second with the chart's rules
   loaded, and waits (bounded) until /api/v1/query returns gateway_pool_signal for the pool, and
   the recording rule pool:gateway_pool_signal:max;
4. runs every PromQL expression of the dashboard against it: each must be accepted
   (status success); the signal, outcome and latency panels must return data.
"""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

procs = []


def start(cmd, log):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(log, "w"), text=True)
    procs.append(p)
    return p


def read_addr(p, prefix, deadline=60):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        line = p.stdout.readline()
        if not line:
            if p.poll() is not None:
                raise SystemExit(f"process exited ({p.returncode}) before printing {prefix!r}")
            continue
        m = re.match(re.escape(prefix) + r" (https?://\S+)", line.strip())
        if m:
            return m.group(1)
    raise SystemExit(f"no {prefix!r} within {deadline}s")


def http(url, data=None, headers=None, timeout=5):
    req = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(what, fn, timeout=30):
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        last = fn()
        if last:
            return last
        time.sleep(0.25)
    raise SystemExit(f"timed out waiting for {what} (last: {last!r})")


def main():
    ap = argparse.ArgumentParser()
    for a in ("gateway", "worker", "ort", "model", "rules", "dashboard"):
        ap.add_argument("--" + a, required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    failures = []
    checks = 0

    def check(cond, what):
        nonlocal checks
        checks += 1
        print(("  ok: " if cond else "  FAIL: ") + what)
        if not cond:
            failures.append(what)

    try:
        env = dict(os.environ, ORT_DYLIB_PATH=args.ort)
        workers = []
        for i in range(2):
            p = subprocess.Popen([args.worker, "--listen", "127.0.0.1:0", "--model", args.model],
                                 stdout=subprocess.PIPE, stderr=open(f"{tmp}/worker{i}.log", "w"), text=True, env=env)
            procs.append(p)
            workers.append(read_addr(p, "listening on"))
        gw = start([args.gateway, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
                    "--stats-interval", "100ms", "--probe-backoff", "100ms",
                    "--worker", workers[0], "--worker", workers[1]], f"{tmp}/gateway.log")
        admin = read_addr(gw, "admin listening on")
        client = read_addr(gw, "listening on")
        wait("a ready gateway", lambda: http(client + "/readyz")[0] == 200)
        for q in ["play some jazz", "book a table for two", "will it rain tomorrow"] * 4:
            st, _, body = http(client + "/predict", json.dumps({"query": q}).encode(), {"content-type": "application/json"})
            check(st == 200, f"prediction through the gateway: {st} {body[:80]}")
        http(client + "/predict", b"[1]", {"content-type": "application/json"})

        print("== promtool check metrics (live /metrics, text format)")
        for name, url in [("gateway", admin), ("worker 1", workers[0]), ("worker 2", workers[1])]:
            st, ctype, body = http(url + "/metrics")
            check(st == 200 and ctype.startswith("text/plain; version=0.0.4"), f"{name}: /metrics is text 0.0.4 ({ctype})")
            r = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, text=True)
            check(r.returncode == 0, f"{name}: promtool check metrics: {(r.stdout + r.stderr).strip() or 'clean'}")
            st, ctype, om = http(url + "/metrics", headers={"Accept": "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"})
            check(ctype.startswith("application/openmetrics-text") and om.rstrip().endswith("# EOF"), f"{name}: OpenMetrics when asked")

        print("== Prometheus scraping the gateway and both workers")
        port = free_port()
        rules = os.path.join(tmp, "rules.yml")
        shutil.copy(args.rules, rules)
        host = lambda u: urllib.parse.urlsplit(u).netloc
        with open(f"{tmp}/prometheus.yml", "w") as f:
            json.dump({
                "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                "rule_files": [rules],
                "scrape_configs": [
                    {"job_name": "gateway", "static_configs": [{"targets": [host(admin)], "labels": {"namespace": "ml"}}]},
                    {"job_name": "worker", "static_configs": [{"targets": [host(w) for w in workers], "labels": {"namespace": "ml", "pool": "default"}}]},
                ],
            }, f)
        prom = f"http://127.0.0.1:{port}"
        procs.append(subprocess.Popen(
            ["prometheus", f"--config.file={tmp}/prometheus.yml", f"--storage.tsdb.path={tmp}/data",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=open(f"{tmp}/prometheus.log", "w"), stderr=subprocess.STDOUT))

        def query(q):
            st, _, body = http(prom + "/api/v1/query?" + urllib.parse.urlencode({"query": q}))
            return st, (json.loads(body) if body.startswith("{") else {"status": "error", "error": body})

        def result(q):
            try:
                st, j = query(q)
            except OSError:
                return None
            return j.get("data", {}).get("result") if st == 200 else None

        sig = wait("gateway_pool_signal in Prometheus", lambda: result('gateway_pool_signal{pool="default"}'), timeout=45)
        check(len(sig) == 1 and sig[0]["metric"]["job"] == "gateway", f"/api/v1/query gateway_pool_signal: {sig}")
        up = wait("three targets up", lambda: (r := result("up == 1")) and len(r) == 3 and r, timeout=30)
        check(sorted(x["metric"]["job"] for x in up) == ["gateway", "worker", "worker"], "gateway and both workers scraped")
        rec = wait("the recording rule", lambda: result('pool:gateway_pool_signal:max{pool="default"}'), timeout=30)
        check(rec[0]["metric"].get("namespace") == "ml", f"recording rule pool:gateway_pool_signal:max: {rec}")
        wait("two samples of the request counter", lambda: result("count_over_time(gateway_requests_total[1m]) >= 2"), timeout=30)

        print("== every dashboard expression on the live Prometheus")
        with open(args.dashboard) as f:
            dash = json.load(f)
        exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
        must_have_data = ("gateway_pool_signal{", "gateway_requests_total", "gateway_request_duration_seconds_bucket",
                          "gateway_pool_ready_workers", "worker_queue_depth")
        for e in exprs:
            q = e.replace("$namespace", ".*").replace("$pool", "default").replace("$__rate_interval", "1m")
            st, j = query(q)
            ok = st == 200 and j.get("status") == "success"
            data = ok and j["data"]["result"]
            if any(m in e for m in must_have_data) and "kube_" not in e:
                check(bool(data), f"dashboard query has data: {q}")
            else:
                check(ok, f"dashboard query accepted: {q}" + ("" if ok else f" ({j.get('error')})"))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        if failures:
            for log in sorted(os.listdir(tmp)):
                if log.endswith(".log"):
                    print(f"--- {log}\n" + open(os.path.join(tmp, log)).read()[-3000:])
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"live prometheus: {checks - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
