"""Measurement half of benches/loadtest_vs_peers.sh: runs the tools, parses their outputs, prints
the tables. Configuration comes from the environment the script exports."""

import json
import os
import re
import resource
import statistics
import subprocess
import time

E = os.environ
DUR, ROUNDS, CONNS = int(E["DURATION"]), int(E["ROUNDS"]), int(E["CONNS"])
CORE = E["LOAD_CORE"]
LT = E["LOADTEST_BIN"]


def unit_ms(value: str, unit: str) -> float:
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "secs": 1e3}[unit]


def parse_wrk(out: str) -> dict:
    pct = {k: unit_ms(v, u) for k, v, u in re.findall(r"^\s+(50|90|99)(?:\.000)?%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)}
    mx = re.search(r"Latency\s+\S+\s+\S+\s+([\d.]+)(us|ms|s)", out)
    return {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
            "p50": pct["50"], "p90": pct["90"], "p99": pct["99"], "max": unit_ms(*mx.groups()),
            "errors": sum(int(x) for x in re.findall(r"Non-2xx or 3xx responses:\s+(\d+)", out))}


def parse_hey(out: str) -> dict:
    pct = {k: float(v) * 1e3 for k, v in re.findall(r"^\s+(\d+)% in ([\d.]+) secs", out, re.M)}
    codes = re.findall(r"\[(\d+)\]\s+(\d+) responses", out)
    return {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
            "p50": pct["50"], "p90": pct["90"], "p99": pct["99"],
            "max": float(re.search(r"Slowest:\s+([\d.]+) secs", out).group(1)) * 1e3,
            "errors": sum(int(n) for c, n in codes if c != "200")}


def parse_oha(out: str) -> dict:
    j = json.loads(out)
    p = j["latencyPercentiles"]
    codes = j.get("statusCodeDistribution", {})
    return {"rps": j["summary"]["requestsPerSec"], "p50": p["p50"] * 1e3, "p90": p["p90"] * 1e3,
            "p99": p["p99"] * 1e3, "max": j["summary"]["slowest"] * 1e3,
            # Requests cut off by the end of the run are not failures.
            "errors": sum(n for c, n in codes.items() if c != "200")
            + sum(n for e, n in j.get("errorDistribution", {}).items() if "deadline" not in e)}


def parse_loadtest(out: str) -> dict:
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    r = rows[-1]
    return {"rps": r["requests"] / r["seconds"], "p50": r["p50_ms"], "p90": r["p90_ms"], "p99": r["p99_ms"],
            "max": r["max_ms"], "errors": sum(r["errors"].values())}


def commands(url: str, conns: int) -> dict:
    d = f"{DUR}s"
    return {
        "loadtest": ([LT, "--url", url, "-c", str(conns), "-d", d, "--warmup", "0s", "--json"], parse_loadtest),
        "wrk": (["wrk", "-t1", f"-c{conns}", f"-d{d}", "--latency", url + "/predict?query=hello"], parse_wrk),
        "oha": (["oha", "-z", d, "-c", str(conns), "--no-tui", "--output-format", "json", url + "/predict?query=hello"],
                parse_oha),
        "hey": (["hey", "-z", d, "-c", str(conns), url + "/predict?query=hello"], parse_hey),
    }


def run(cmd: list, parse) -> dict:
    """Run one tool pinned to the load core; its figures and its CPU time per request."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(["taskset", "-c", CORE, *cmd], capture_output=True, text=True, timeout=DUR * 4 + 60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({p.returncode}): {p.stderr[-2000:]}")
    r = parse(p.stdout)
    n = r["rps"] * DUR
    r["user_us"] = (after.ru_utime - before.ru_utime) / n * 1e6
    r["sys_us"] = (after.ru_stime - before.ru_stime) / n * 1e6
    return r


def hold(url: str) -> dict:
    """How long the delaying upstream held the requests since the last call (and reset)."""
    import urllib.request
    with urllib.request.urlopen(url + "/__stats") as f:
        return json.load(f)


def capacity() -> None:
    tools = list(commands(E["FAST_URL"], CONNS))
    res = {t: [] for t in tools}
    for i in range(ROUNDS):
        order = tools[i % len(tools):] + tools[:i % len(tools)]
        for t in order:
            cmd, parse = commands(E["FAST_URL"], CONNS)[t]
            res[t].append(run(cmd, parse))
            time.sleep(1)
    print(f"\n## Capacity: one core each, {CONNS} connections, {DUR} s, {ROUNDS} rounds (tool order rotated)")
    print(f"{'tool':9} {'median req/s':>12} {'range req/s':>17} {'rounds req/s':>26} {'user us/req':>11} {'sys us/req':>10} "
          f"{'p50 ms':>7} {'p99 ms':>7} {'errors':>6}")
    for t in tools:
        rs = res[t]
        rps = [r["rps"] for r in rs]
        med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
        print(f"{t:9} {statistics.median(rps):12.0f} {min(rps):8.0f}-{max(rps):<8.0f} "
              f"{' '.join(f'{x:.0f}' for x in rps):>26} {med('user_us'):11.2f} {med('sys_us'):10.2f} "
              f"{med('p50'):7.3f} {med('p99'):7.3f} {sum(r['errors'] for r in rs):6d}")
    lt = statistics.median(r["rps"] for r in res["loadtest"])
    for t in tools[1:]:
        other = statistics.median(r["rps"] for r in res[t])
        ahead = sum(a["rps"] >= b["rps"] for a, b in zip(res["loadtest"], res[t]))
        print(f"loadtest / {t}: x{lt / other:.2f} (median), ahead in {ahead}/{ROUNDS} rounds")


def latency() -> None:
    url = E["SLOW_URL"]
    conns = int(E["DELAY_CONNS"])
    hold(url)  # reset
    print(f"\n## Latency against an upstream holding each request {E['DELAY']}: {conns} connections, {DUR} s")
    print(f"{'tool':20} {'req/s':>8} {'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7} {'max ms':>7} | "
          f"{'held p50':>8} {'held p99':>8} {'held max':>8} | {'p50 - held p50':>14}")
    rows = [(t, *commands(url, conns)[t]) for t in commands(url, conns)]
    rate = E["DELAY_RATE"]
    rows.append((f"loadtest --rate {rate}", [LT, "--url", url, "--rate", rate, "-d", f"{DUR}s", "--warmup", "0s",
                                           "--json"], parse_loadtest))
    for name, cmd, parse in rows:
        r = run(cmd, parse)
        h = hold(url)
        print(f"{name:20} {r['rps']:8.0f} {r['p50']:7.2f} {r['p90']:7.2f} {r['p99']:7.2f} {r['max']:7.2f} | "
              f"{h['p50_ms']:8.2f} {h['p99_ms']:8.2f} {h['max_ms']:8.2f} | {r['p50'] - h['p50_ms']:+14.2f}")
        time.sleep(1)


def memory() -> None:
    soak, rate = int(E["SOAK"]), E["SOAK_RATE"]
    cmd = ["taskset", "-c", CORE, LT, "--url", E["FAST_URL"], "--rate", rate, "-d", f"{soak}s", "--warmup", "0s",
           "--json", "--max-outstanding", "256"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    samples = []
    t0 = time.time()
    while p.poll() is None:
        try:
            with open(f"/proc/{p.pid}/status") as f:
                rss = int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1))
            samples.append((time.time() - t0, rss / 1024))
        except (OSError, AttributeError):
            pass
        time.sleep(5)
    out = parse_loadtest(p.stdout.read())
    print(f"\n## Memory: loadtest open loop at {rate}/s for {soak} s: {out['rps'] * soak:.0f} requests "
          f"({out['rps']:.0f}/s achieved)")
    print("t s:    " + " ".join(f"{t:6.0f}" for t, _ in samples))
    print("RSS MiB:" + " ".join(f"{m:6.1f}" for _, m in samples))
    if len(samples) > 2:
        print(f"RSS at {samples[1][0]:.0f} s: {samples[1][1]:.1f} MiB, at the end: {samples[-1][1]:.1f} MiB, "
              f"max {max(m for _, m in samples):.1f} MiB")


if __name__ == "__main__":
    capacity()
    latency()
    memory()
