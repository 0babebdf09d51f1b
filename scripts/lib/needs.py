"""The demo's R series for loadtest's report: the replicas each load step needs, load / (C x u).

    needs.py OUT "R1 R2 ..." STEP_S TAIL_S C U

Writes JSON lines {"t": UNIX_SECONDS, "series": "replicas_needed_R", "value": R}, one at each
step's start (the load generator starts right after), and the tail's constant low step.
"""
import json
import sys
import time

path, rates = sys.argv[1], [float(r) for r in sys.argv[2].split()]
step, tail, c, u = (float(a) for a in sys.argv[3:7])
t0 = time.time() + 0.2
with open(path, "w") as f:
    points = [(t0 + i * step, r) for i, r in enumerate(rates)]
    points += [(t0 + len(rates) * step, rates[0]), (t0 + len(rates) * step + tail, rates[0])]
    for t, r in points:
        f.write(json.dumps({"t": t, "series": "replicas_needed_R", "value": r / (c * u)}) + "\n")
print("   R = load / (C x u), C = %.0f requests/s, u = %s: %s" % (c, u, " ".join("%.2f" % (r / (c * u)) for r in rates)))
