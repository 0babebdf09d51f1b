"""A client generated from KEDA's externalscaler.proto with grpcio-tools against the gateway's
external scaler: the metric spec, the signal, activation, and the first stream messages."""

import importlib
import json
import sys
import threading
import time
import urllib.request

import grpc
import pytest
from grpc_tools import protoc

from conftest import ROOT, start_gateway, wait_until

PROTO_DIR = ROOT / "gateway" / "proto"


@pytest.fixture(scope="module")
def keda(tmp_path_factory):
    out = tmp_path_factory.mktemp("externalscaler")
    rc = protoc.main(["protoc", f"-I{PROTO_DIR}", f"--python_out={out}", f"--grpc_python_out={out}",
                      str(PROTO_DIR / "externalscaler.proto")])
    assert rc == 0, "grpcio-tools could not compile externalscaler.proto"
    sys.path.insert(0, str(out))
    try:
        yield importlib.import_module("externalscaler_pb2"), importlib.import_module("externalscaler_pb2_grpc")
    finally:
        sys.path.remove(str(out))


@pytest.fixture(scope="module")
def idle_gateway():
    """A gateway whose default pool has no worker (a pool scaled to zero): a request waits for one."""
    s = start_gateway("--no-worker-wait", "10s")
    yield s
    s.stop()


def admin_signal(gw, pool="default"):
    with urllib.request.urlopen(f"{gw.announced('admin')}/pools/{pool}/signal", timeout=5) as r:
        return json.load(r)


def test_spec_metrics_and_activation_from_zero(keda, idle_gateway):
    pb, pb_grpc = keda
    channel = grpc.insecure_channel(idle_gateway.hostport("grpc"))
    stub = pb_grpc.ExternalScalerStub(channel)
    ref = pb.ScaledObjectRef(name="workers", namespace="default", scalerMetadata={"pool": "default"})

    spec = stub.GetMetricSpec(ref)
    assert [(m.metricName, m.targetSizeFloat) for m in spec.metricSpecs] == [("gateway_pool_signal", 1.0)]
    assert next(stub.StreamMetricSpec(ref, timeout=5)) == spec

    value = stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref, metricName="gateway_pool_signal"))
    assert [m.metricName for m in value.metricValues] == ["gateway_pool_signal"]
    assert value.metricValues[0].metricValueFloat == admin_signal(idle_gateway)["signal"]
    assert not stub.IsActive(ref).result

    # The stream's first message is the current value; a request arriving for the empty pool
    # activates it at once (it waits in the gateway's backlog), with no poll in between.
    stream = stub.StreamIsActive(ref, timeout=20)
    assert next(stream).result is False
    url = f"{idle_gateway.url}/predict?query=play+jazz"
    threading.Thread(target=_swallow, args=(url,), daemon=True).start()
    assert next(stream).result is True
    assert stub.IsActive(ref).result
    stream.cancel()

    # The signal goes up with the backlog, read the same way KEDA reads it.
    wait_until("the backlog shows in the signal", lambda: stub.GetMetrics(
        pb.GetMetricsRequest(scaledObjectRef=ref, metricName="gateway_pool_signal")).metricValues[0].metricValueFloat > 0)

    with pytest.raises(grpc.RpcError) as e:
        stub.IsActive(pb.ScaledObjectRef(name="x", namespace="y", scalerMetadata={"pool": "ghost"}))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_stream_is_active_turns_true_within_100ms_of_the_first_held_request(keda):
    """A pool at zero, the gateway's default flags: the first request is held (--cold-start-hold),
    and KEDA's StreamIsActive, as its activator reads it, says so within 100 ms."""
    pb, pb_grpc = keda
    gw = start_gateway()
    try:
        stub = pb_grpc.ExternalScalerStub(grpc.insecure_channel(gw.hostport("grpc")))
        ref = pb.ScaledObjectRef(name="workers", namespace="default", scalerMetadata={"pool": "default"})
        stream = stub.StreamIsActive(ref, timeout=20)
        assert next(stream).result is False
        sent = time.monotonic()
        threading.Thread(target=_swallow, args=(f"{gw.url}/predict?query=play+jazz",), daemon=True).start()
        assert next(stream).result is True
        waited = time.monotonic() - sent
        assert waited < 0.1, f"StreamIsActive turned true {waited * 1000:.0f} ms after the request was sent"
        # Held, not refused: the request still waits for a worker, and the admin port shows it.
        assert admin_signal(gw)["held_requests"] == 1
        stream.cancel()
    finally:
        gw.stop()


def _swallow(url):
    try:
        urllib.request.urlopen(url, timeout=30).read()
    except Exception:  # noqa: BLE001 - a 503 after the wait is expected and beside the point
        pass
