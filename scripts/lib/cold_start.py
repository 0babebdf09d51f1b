"""The first requests to a pool at zero (scripts/demo.sh with DEMO_MIN=0): N requests sent at
once to the gateway, held there while the scaler starts a worker; prints how many were answered
200 and the cold start (first request sent to first answer), and writes them as JSON for the
summary.

    python3 scripts/lib/cold_start.py GATEWAY_URL N OUT.json
"""

import json
import sys
import threading
import time
import urllib.error
import urllib.request


def main():
    gw, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    t0 = time.monotonic()
    answers = []
    lock = threading.Lock()

    def send(i):
        try:
            with urllib.request.urlopen(f"{gw}/predict?query=wake+up+and+play+some+jazz+{i}", timeout=120) as r:
                status = r.status
        except urllib.error.HTTPError as e:
            status = e.code
        except OSError:  # a transport failure or a timeout: failed
            status = 0
        with lock:
            answers.append((status, time.monotonic() - t0))

    threads = [threading.Thread(target=send, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = sum(1 for s, _ in answers if s == 200)
    first = min(t for s, t in answers if s == 200) if ok else float("nan")
    others = sorted({s for s, _ in answers if s != 200})
    print(f"   {n} requests: {ok} answered 200" + (f", the rest {others}" if others else "")
          + f"; the first answer {first:.2f} s after they were sent (the cold start)")
    with open(out, "w") as f:
        json.dump({"requests": n, "ok": ok, "cold_start_s": first}, f)


if __name__ == "__main__":
    main()
