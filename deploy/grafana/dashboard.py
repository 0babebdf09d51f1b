"""Writes the Grafana dashboard of the inference gateway (standard library only):

    python3 deploy/grafana/dashboard.py > deploy/grafana/inference-gateway.json

The chart ships the same file (deploy/helm/inference-gateway/files/dashboard.json) in a
ConfigMap for Grafana's sidecar. deploy/test.sh checks that both equal this script's output and
that every PromQL expression in it parses (promtool) and runs on a real Prometheus.
"""
import json
import sys

SEL = 'namespace=~"$namespace",pool="$pool"'
HPA = 'namespace=~"$namespace",horizontalpodautoscaler=~".+-worker-$pool"'
RATE = "$__rate_interval"

_next_id = [0]


def next_id():
    _next_id[0] += 1
    return _next_id[0]


def target(expr, legend, ref):
    return {"datasource": {"type": "prometheus", "uid": "${datasource}"}, "expr": expr,
            "legendFormat": legend, "refId": ref, "range": True}


def panel(title, targets, x, y, w=12, h=8, unit="short", description="", max_=None):
    defaults = {"unit": unit, "custom": {"lineWidth": 1, "fillOpacity": 10, "showPoints": "never"}}
    if max_ is not None:
        defaults["max"] = max_
        defaults["min"] = 0
    return {
        "id": next_id(),
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
        "targets": [target(e, l, chr(ord("A") + i)) for i, (e, l) in enumerate(targets)],
    }


def pool_row(y):
    panels = [{
        "id": next_id(), "type": "row", "title": "Pool $pool", "repeat": "pool", "collapsed": False,
        "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}, "panels": [],
    }]
    y += 1
    panels += [
        panel("Signal and its components (replicas)", [
            (f"max by (pool) (gateway_pool_signal{{{SEL}}})", "signal (smoothed)"),
            (f"max by (pool) (gateway_pool_signal_raw{{{SEL}}})", "raw"),
            (f"max by (pool, component) (gateway_pool_signal_component{{{SEL}}})", "{{component}}"),
        ], 0, y, description="gateway_pool_signal is what the HPA reads (averageValue 1: replicas "
                              "wanted). The components: queue term, GPU term, held (stale "
                              "workers), backlog, blind floor."),
        panel("Replicas: desired, current, ready", [
            (f"max(kube_horizontalpodautoscaler_status_desired_replicas{{{HPA}}})", "desired (HPA)"),
            (f"max(kube_horizontalpodautoscaler_status_current_replicas{{{HPA}}})", "current (HPA)"),
            (f"max(kube_horizontalpodautoscaler_spec_max_replicas{{{HPA}}})", "max (HPA)"),
            (f"max(gateway_pool_workers{{{SEL}}})", "discovered workers"),
            (f"max(gateway_pool_ready_workers{{{SEL}}})", "ready workers"),
        ], 12, y, description="HPA series come from kube-state-metrics."),
    ]
    y += 8
    panels += [
        panel("Requests by outcome", [
            (f"sum by (outcome) (rate(gateway_requests_total{{{SEL}}}[{RATE}]))", "{{outcome}}"),
        ], 0, y, unit="reqps"),
        panel("Latency at the gateway", [
            (f"histogram_quantile(0.5, sum by (le) (rate(gateway_request_duration_seconds_bucket{{{SEL}}}[{RATE}])))", "p50"),
            (f"histogram_quantile(0.9, sum by (le) (rate(gateway_request_duration_seconds_bucket{{{SEL}}}[{RATE}])))", "p90"),
            (f"histogram_quantile(0.99, sum by (le) (rate(gateway_request_duration_seconds_bucket{{{SEL}}}[{RATE}])))", "p99"),
        ], 12, y, unit="s"),
    ]
    y += 8
    panels += [
        panel("Queue and backlog", [
            (f"max by (worker) (gateway_worker_queue{{{SEL}}})", "queue {{worker}}"),
            (f"max(gateway_pool_backlog{{{SEL}}})", "backlog at the gateway"),
            (f"sum(worker_queue_depth{{{SEL}}}) + sum(worker_in_flight{{{SEL}}})", "queued + in flight (workers)"),
        ], 0, y, description="gateway_worker_queue: the worker's reported queue plus the gateway's "
                              "requests since; backlog: requests waiting for a ready worker."),
        panel("Staleness", [
            (f"max(gateway_pool_signal_stale{{{SEL}}})", "pool stale"),
            (f"max by (worker) (gateway_worker_telemetry_age_seconds{{{SEL}}})", "telemetry age {{worker}}"),
        ], 12, y, unit="s"),
    ]
    y += 8
    panels += [
        panel("GPU utilization per worker", [
            (f"max by (worker) (gateway_worker_gpu_utilization_ratio{{{SEL}}})", "{{worker}}"),
        ], 0, y, unit="percentunit", max_=1,
            description="Process SM utilization on a shared GPU (MIG, time-slicing), else the "
                        "device's; the signal's saturation guard (--gpu-saturation)."),
        panel("GPU memory used per worker", [
            (f"max by (worker) (gateway_worker_gpu_memory_used_ratio{{{SEL}}})", "{{worker}}"),
        ], 12, y, unit="percentunit", max_=1),
    ]
    return panels, y + 8


def dashboard():
    panels, y = pool_row(0)
    panels.append({"id": next_id(), "type": "row", "title": "Gateways", "collapsed": False,
                   "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}, "panels": []})
    y += 1
    panels += [
        panel("Requests held per gateway", [
            ('sum by (pod, instance) (gateway_outstanding{namespace=~"$namespace"})', "{{pod}}{{instance}}"),
        ], 0, y),
        panel("External metrics API answers", [
            (f'sum by (code, reason) (rate(gateway_metrics_api_requests_total{{namespace=~"$namespace"}}[{RATE}]))',
             "{{code}} {{reason}}"),
        ], 12, y, unit="reqps"),
    ]
    return {
        "uid": "inference-gateway",
        "title": "Inference gateway",
        "description": "Per pool: the scaling signal and its parts, replicas, requests, latency, "
                       "queue, GPU utilization and memory per worker.",
        "tags": ["inference", "gpu", "autoscaling"],
        "timezone": "browser",
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "graphTooltip": 1,
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Data source",
             "current": {}, "hide": 0},
            {"name": "namespace", "type": "query", "label": "Namespace",
             "datasource": {"type": "prometheus", "uid": "${datasource}"},
             "query": {"query": "label_values(gateway_pool_signal, namespace)", "refId": "namespace"},
             "definition": "label_values(gateway_pool_signal, namespace)",
             "includeAll": True, "allValue": ".*", "multi": True, "refresh": 2, "current": {}},
            {"name": "pool", "type": "query", "label": "Pool",
             "datasource": {"type": "prometheus", "uid": "${datasource}"},
             "query": {"query": 'label_values(gateway_pool_signal{namespace=~"$namespace"}, pool)', "refId": "pool"},
             "definition": 'label_values(gateway_pool_signal{namespace=~"$namespace"}, pool)',
             "includeAll": True, "multi": True, "refresh": 2, "current": {}},
        ]},
        "annotations": {"list": []},
        "panels": panels,
    }


if __name__ == "__main__":
    json.dump(dashboard(), sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
