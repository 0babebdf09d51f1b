"""What the chart must render, checked on `helm template` output (one file per values file of
the chart's ci/ folder), and the files that must agree with each other:

    python chart_checks.py RENDERED.yaml...

- the client Service carries no admin port; the metrics-API and admin Services publish not-ready
  gateways; the gateway runs 2 replicas under a PodDisruptionBudget;
- worker pools: probes on /readyz and /healthz, a grace period longer than the drain, GPU pools
  request nvidia.com/gpu and tolerate its taint, CPU pools neither;
- the APIService (mode apiservice only) has a caBundle or cert-manager's inject annotation, never
  insecureSkipTLSVerify; the RBAC an extension API server needs; no APIService in the other modes;
- HPAs (or KEDA's) behaviour is exactly the documented default, target AverageValue "1" on
  gateway_pool_signal with selector pool=NAME; KEDA reads /pools/NAME/signal on the admin port;
- the PrometheusRule's groups are deploy/prometheus/rules.yml's; the dashboard ConfigMap holds
  deploy/grafana/inference-gateway.json, which is deploy/grafana/dashboard.py's output;
- deploy/README.md's values table names every key of values.yaml (or an ancestor) with its
  default, and no key that does not exist.
"""
import json
import os
import re
import subprocess
import sys

import yaml

root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
chart = os.path.join(root, "deploy", "helm", "inference-gateway")

BEHAVIOR = yaml.safe_load("""
scaleUp:
  stabilizationWindowSeconds: 0
  selectPolicy: Max
  policies:
    - {type: Percent, value: 100, periodSeconds: 15}
    - {type: Pods, value: 4, periodSeconds: 15}
scaleDown:
  stabilizationWindowSeconds: 300
  selectPolicy: Max
  policies:
    - {type: Percent, value: 50, periodSeconds: 60}
""")

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def read(path):
    with open(os.path.join(root, path)) as f:
        return f.read()


def args_of(container):
    return dict(a.split("=", 1) if "=" in a else (a, "") for a in container.get("args", []))


def check_rendered(path):
    name = os.path.basename(path)
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    values = yaml.safe_load(read("deploy/helm/inference-gateway/ci/" + name.replace("rendered-", "")))
    mode = ((values or {}).get("autoscaling") or {}).get("mode", "apiservice")
    deployments = {d["metadata"]["name"]: d for d in by_kind.get("Deployment", [])}
    services = {d["metadata"]["name"]: d for d in by_kind.get("Service", [])}

    gw = [d for d in deployments.values() if d["metadata"]["labels"].get("app.kubernetes.io/component") == "gateway"]
    check(len(gw) == 1, f"{name}: one gateway Deployment")
    gw = gw[0]
    check(gw["spec"]["replicas"] == 2, f"{name}: gateway replicas 2")
    gc = gw["spec"]["template"]["spec"]["containers"][0]
    ga = args_of(gc)
    check(ga.get("--admin-listen") == "0.0.0.0:9090", f"{name}: --admin-listen 0.0.0.0:9090")
    check(ga.get("--target-gpu") == "70", f"{name}: --target-gpu in percent (70)")
    want_ready = ((values or {}).get("gateway") or {}).get("readinessPath", "/readyz")
    check(gc["readinessProbe"]["httpGet"]["path"] == want_ready, f"{name}: gateway readiness {want_ready}")
    check(gc["livenessProbe"]["httpGet"]["path"] == "/healthz", f"{name}: gateway liveness /healthz")
    check(any(p["spec"].get("minAvailable") == 1 for p in by_kind.get("PodDisruptionBudget", [])
              if p["metadata"]["name"] == gw["metadata"]["name"]), f"{name}: gateway PDB")

    client = [s for s in services.values() if s["metadata"]["labels"].get("app.kubernetes.io/component") == "gateway"]
    check(len(client) == 1, f"{name}: one client Service")
    for s in client:
        ports = s["spec"]["ports"]
        check([p["targetPort"] for p in ports] == ["http", "grpc"],
              f"{name}: client Service serves only the http and grpc (Open Inference Protocol) ports, not {ports}")
    for s in services.values():
        if s["metadata"]["labels"].get("app.kubernetes.io/component") in ("gateway-admin", "metrics-api"):
            check(s["spec"].get("publishNotReadyAddresses") is True, f"{name}: {s['metadata']['name']} publishes not-ready gateways")

    workers = [d for d in deployments.values() if d["metadata"]["labels"].get("app.kubernetes.io/component") == "worker"]
    check(workers, f"{name}: worker Deployments")
    gpu_pools = cpu_pools = 0
    for d in workers:
        pool = d["metadata"]["labels"]["inference-gateway/pool"]
        spec = d["spec"]["template"]["spec"]
        c = spec["containers"][0]
        a = args_of(c)
        drain = int(a["--drain-timeout"].rstrip("s"))
        pre = c.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
        check(spec["terminationGracePeriodSeconds"] > 2 * drain + pre,
              f"{name}: pool {pool}: grace {spec['terminationGracePeriodSeconds']} > 2 x drain {drain} + preStop {pre}")
        check(c["readinessProbe"]["httpGet"]["path"] == "/readyz", f"{name}: pool {pool} readiness /readyz")
        check(c["livenessProbe"]["httpGet"]["path"] == "/healthz", f"{name}: pool {pool} liveness /healthz")
        gpus = c["resources"].get("limits", {}).get("nvidia.com/gpu")
        tolerates = any(t.get("key") == "nvidia.com/gpu" for t in spec.get("tolerations", []))
        if a["--device"].startswith("cuda"):
            gpu_pools += 1
            check(gpus and gpus >= 1 and tolerates, f"{name}: GPU pool {pool} requests nvidia.com/gpu and tolerates it")
        else:
            cpu_pools += 1
            check(a["--device"] == "cpu" and not gpus and not tolerates, f"{name}: CPU pool {pool} without GPU")
            check("worker-cpu" in c["image"], f"{name}: CPU pool {pool} runs the CPU image")
        check(f"--k8s-service={pool}={d['metadata']['namespace']}/{d['metadata']['name']}:http" in gc["args"],
              f"{name}: the gateway discovers pool {pool} from its Service")
        svc = services.get(d["metadata"]["name"])
        check(svc and svc["spec"].get("clusterIP") == "None", f"{name}: pool {pool} has a headless Service")
        if mode == "keda":
            check("replicas" not in d["spec"], f"{name}: autoscaled Deployment leaves replicas to the HPA")
    if "cpu-only" in name:
        check(gpu_pools == 0 and cpu_pools > 0, f"{name}: CPU only")
    else:
        check(gpu_pools > 0, f"{name}: GPU pools")

    apis = by_kind.get("APIService", [])
    crbs = by_kind.get("ClusterRoleBinding", [])
    rbs = by_kind.get("RoleBinding", [])
    check(any("discovery.k8s.io" in r["apiGroups"] and {"list", "watch"} <= set(r["verbs"]) and "endpointslices" in r["resources"]
              for role in by_kind.get("Role", []) for r in role["rules"]), f"{name}: EndpointSlice list/watch")
    if mode == "apiservice":
        check(len(apis) == 1 and apis[0]["metadata"]["name"] == "v1beta1.external.metrics.k8s.io", f"{name}: the APIService")
        for a in apis:
            check(not a["spec"].get("insecureSkipTLSVerify"), f"{name}: no insecureSkipTLSVerify")
            injected = "cert-manager.io/inject-ca-from" in a["metadata"].get("annotations", {})
            check(bool(a["spec"].get("caBundle")) != injected, f"{name}: caBundle xor cert-manager injection")
            if injected:
                check(by_kind.get("Certificate"), f"{name}: cert-manager Certificate")
        check(any(b["roleRef"]["name"] == "system:auth-delegator" for b in crbs), f"{name}: system:auth-delegator")
        check(any(b["roleRef"]["name"] == "extension-apiserver-authentication-reader" and b["metadata"]["namespace"] == "kube-system"
                  for b in rbs), f"{name}: extension-apiserver-authentication-reader in kube-system")
    else:
        check(not apis, f"{name}: no APIService in mode {mode}")
    if mode in ("apiservice", "prometheus-adapter"):
        check(any(r["apiGroups"] == ["external.metrics.k8s.io"] for cr in by_kind.get("ClusterRole", []) for r in cr["rules"]),
              f"{name}: ClusterRole reading external metrics")
        check(any(s["name"] == "horizontal-pod-autoscaler" and s["namespace"] == "kube-system" for b in crbs for s in b["subjects"]),
              f"{name}: bound to the HPA controller")
        hpas = by_kind.get("HorizontalPodAutoscaler", [])
        check(len(hpas) == len(workers), f"{name}: one HPA per pool")
        for h in hpas:
            pool = h["metadata"]["labels"]["inference-gateway/pool"]
            m = h["spec"]["metrics"][0]["external"]
            check(h["apiVersion"] == "autoscaling/v2", f"{name}: autoscaling/v2")
            check(m["metric"] == {"name": "gateway_pool_signal", "selector": {"matchLabels": {"pool": pool}}}, f"{name}: HPA metric of {pool}")
            check(m["target"] == {"type": "AverageValue", "averageValue": "1"}, f"{name}: AverageValue 1")
            check(h["spec"]["behavior"] == BEHAVIOR, f"{name}: HPA behavior is the documented default")
        if mode == "prometheus-adapter":
            cms = [c for c in by_kind.get("ConfigMap", []) if c["metadata"]["name"].endswith("prometheus-adapter-rules")]
            check(cms and "gateway_pool_signal" in cms[0]["data"]["config.yaml"], f"{name}: adapter rule")
    if mode == "keda":
        check(not by_kind.get("HorizontalPodAutoscaler"), f"{name}: KEDA makes the HPA")
        sos = by_kind.get("ScaledObject", [])
        check(len(sos) == len(workers), f"{name}: one ScaledObject per pool")
        for so in sos:
            pool = so["metadata"]["labels"]["inference-gateway/pool"]
            t = so["spec"]["triggers"][0]
            if t["type"] == "external-push":
                check(t["metricType"] == "AverageValue", f"{name}: external-push scaler")
                check(re.fullmatch(r"[a-z0-9-]+-admin\.[a-z0-9-]+\.svc:9000", t["metadata"]["scalerAddress"]),
                      f"{name}: KEDA's external scaler is the gateway's gRPC port: {t['metadata']['scalerAddress']}")
                check(t["metadata"]["pool"] == pool, f"{name}: the trigger names pool {pool}")
                admin = [s for s in services.values() if s["metadata"]["name"].endswith("-admin")]
                check(admin and any(p["name"] == "grpc" and p["port"] == 9000 for p in admin[0]["spec"]["ports"]),
                      f"{name}: the admin Service publishes the gRPC port")
                continue
            check(t["type"] == "metrics-api" and t["metricType"] == "AverageValue", f"{name}: metrics-api scaler")
            check(re.fullmatch(r"http://[a-z0-9-]+-admin\.[a-z0-9-]+\.svc:9090/pools/%s/signal" % re.escape(pool), t["metadata"]["url"]),
                  f"{name}: KEDA reads /pools/{pool}/signal on the admin port: {t['metadata']['url']}")
            check(t["metadata"]["valueLocation"] == "signal" and t["metadata"]["targetValue"] == "1", f"{name}: valueLocation/targetValue")
            check(so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] == BEHAVIOR, f"{name}: KEDA behavior")

    rules = yaml.safe_load(read("deploy/prometheus/rules.yml"))
    for pr in by_kind.get("PrometheusRule", []):
        check(pr["spec"]["groups"] == rules["groups"], f"{name}: PrometheusRule groups are rules.yml's")
    for cm in by_kind.get("ConfigMap", []):
        if "inference-gateway.json" in cm.get("data", {}):
            check(cm["metadata"]["labels"].get("grafana_dashboard") == "1", f"{name}: dashboard sidecar label")
            check(json.loads(cm["data"]["inference-gateway.json"]) == json.loads(read("deploy/grafana/inference-gateway.json")),
                  f"{name}: dashboard ConfigMap is deploy/grafana/inference-gateway.json")


def flatten(v, prefix=""):
    if isinstance(v, dict) and v:
        for k, x in v.items():
            yield from flatten(x, f"{prefix}.{k}" if prefix else k)
    else:
        yield prefix, v


def check_files_and_readme():
    check(read("deploy/prometheus/rules.yml") == read("deploy/helm/inference-gateway/files/rules.yml"),
          "deploy/prometheus/rules.yml and the chart's files/rules.yml differ")
    dash = read("deploy/grafana/inference-gateway.json")
    check(dash == read("deploy/helm/inference-gateway/files/dashboard.json"), "the chart's files/dashboard.json differs")
    made = subprocess.run([sys.executable, os.path.join(root, "deploy/grafana/dashboard.py")], capture_output=True, text=True, check=True).stdout
    check(dash == made, "deploy/grafana/inference-gateway.json is not dashboard.py's output (regenerate it)")

    values = yaml.safe_load(read("deploy/helm/inference-gateway/values.yaml"))
    leaves = dict(flatten(values))
    readme = read("deploy/README.md")
    section = readme.split("## Values", 1)[1].split("\n## ", 1)[0]
    documented = {}
    for line in section.splitlines():
        m = re.match(r"\|\s*`([^`]+)`\s*\|\s*(.*?)\s*\|", line)
        if m:
            documented[m.group(1)] = m.group(2)
    check(documented, "README: a values table")
    for key in documented:
        exists = key in leaves or any(k.startswith(key + ".") for k in leaves)
        check(exists, f"README documents {key}, which values.yaml does not have")
    for key, v in leaves.items():
        parts = key.split(".")
        anc = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
        doc = next((a for a in anc if a in documented), None)
        check(doc is not None, f"values.yaml key {key} is not in deploy/README.md's values table")
        if doc == key and not isinstance(v, (dict, list)):
            shown = documented[key].strip("`")
            want = json.dumps(v) if isinstance(v, str) else yaml.safe_dump(v).split("\n")[0]
            check(shown in (want, str(v), "" if v == "" else None), f"README default of {key}: {shown!r}, values.yaml {want}")


for p in sys.argv[1:]:
    check_rendered(p)
check_files_and_readme()
for f in failures:
    print("FAIL", f)
print(f"chart_checks.py: {len(sys.argv) - 1} rendered files, {len(failures)} failures")
sys.exit(1 if failures else 0)
