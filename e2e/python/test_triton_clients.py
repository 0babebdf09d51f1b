"""Triton's own Python clients (tritonclient, HTTP and gRPC) against the worker and the gateway:
health, metadata, an inference on a batch, the logits when named, and an error."""

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import MODEL, sanity, wait_until

CLIENTS = {"http": (httpclient, ""), "grpc": (grpcclient, "grpc")}


@pytest.fixture(params=["http", "grpc"])
def client(request, server):
    module, port = CLIENTS[request.param]
    c = module.InferenceServerClient(url=server.hostport(port))
    wait_until("the server is ready", lambda: c.is_server_ready())
    return request.param, module, c


def batch():
    qs = sanity()["queries"]
    return [q["text"] for q in qs], [q["intent"] for q in qs]


def inputs(module, texts, shape):
    i = module.InferInput("text", shape, "BYTES")
    data = np.array([t.encode() for t in texts], dtype=np.object_).reshape(shape)
    if module is httpclient:
        i.set_data_from_numpy(data, binary_data=False)
    else:
        i.set_data_from_numpy(data)
    return [i]


def output(module, name):
    if module is httpclient:
        return module.InferRequestedOutput(name, binary_data=False)
    return module.InferRequestedOutput(name)


def test_health_and_metadata(client):
    kind, _, c = client
    assert c.is_server_live()
    assert c.is_model_ready(MODEL)
    assert not c.is_model_ready(MODEL, model_version="7")
    meta = c.get_model_metadata(MODEL)
    if kind == "grpc":
        assert meta.name == MODEL and list(meta.versions) == ["1"]
        assert [(t.name, t.datatype) for t in meta.inputs] == [("text", "BYTES")]
        assert [t.name for t in meta.outputs] == ["label", "score", "logits"]
    else:
        assert meta["name"] == MODEL and meta["versions"] == ["1"]
        assert meta["inputs"] == [{"name": "text", "datatype": "BYTES", "shape": [-1]}]
        assert [t["name"] for t in meta["outputs"]] == ["label", "score", "logits"]
    server_meta = c.get_server_metadata()
    name = server_meta.name if kind == "grpc" else server_meta["name"]
    assert name in ("inference-worker", "inference-gateway")


@pytest.mark.parametrize("column", [False, True])
def test_infer_on_a_batch(client, column):
    _, module, c = client
    texts, intents = batch()
    shape = [len(texts), 1] if column else [len(texts)]
    outs = [output(module, n) for n in ("label", "score", "logits")]
    r = c.infer(MODEL, inputs(module, texts, shape), outputs=outs, request_id="batch-1")
    labels = r.as_numpy("label")
    assert list(labels.shape) == shape
    assert [x.decode() if isinstance(x, bytes) else x for x in labels.reshape(-1)] == intents
    scores = r.as_numpy("score")
    assert scores.dtype == np.float32 and list(scores.shape) == shape
    assert ((scores > 0.5) & (scores <= 1.0)).all()
    logits = r.as_numpy("logits")
    assert logits.shape == (len(texts), len(sanity()["labels"]))
    # The score is the softmax of the logits at the label's index.
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    assert np.allclose((e / e.sum(axis=1, keepdims=True)).max(axis=1), scores.reshape(-1), atol=1e-5)
    response = r.get_response()
    assert (response["id"] if module is httpclient else response.id) == "batch-1"


def test_default_outputs_leave_the_logits_out(client):
    _, module, c = client
    r = c.infer(MODEL, inputs(module, ["play some jazz"], [1]))
    assert r.as_numpy("label") is not None and r.as_numpy("score") is not None
    assert r.as_numpy("logits") is None


def test_errors(client):
    kind, module, c = client
    with pytest.raises(InferenceServerException) as e:
        c.infer("no-such-model", inputs(module, ["hi"], [1]))
    assert "unknown model" in e.value.message()
    if kind == "grpc":
        assert e.value.status() == "StatusCode.NOT_FOUND"
    else:
        assert e.value.status() == "404"
    with pytest.raises(InferenceServerException) as e:
        c.infer(MODEL, inputs(module, ["hi"], [1]), outputs=[output(module, "probabilities")])
    assert "unknown output" in e.value.message()
    assert e.value.status() in ("StatusCode.INVALID_ARGUMENT", "400")


def test_model_config(client):
    """Triton's model configuration extension: what its tools read before they send."""
    kind, _, c = client
    config = c.get_model_config(MODEL)
    if kind == "grpc":
        config = config.config
        assert (config.name, config.platform, config.max_batch_size) == (MODEL, "onnxruntime_onnx", 0)
        # Triton's own DataType enum, decoded by tritonclient's copy of model_config.proto.
        assert [(t.name, grpcclient.model_config_pb2.DataType.Name(t.data_type), list(t.dims))
                for t in config.input] == [("text", "TYPE_STRING", [-1])]
        assert [(t.name, list(t.dims)) for t in config.output][:2] == [("label", [-1]), ("score", [-1])]
    else:
        assert (config["name"], config["max_batch_size"]) == (MODEL, 0)
        assert config["input"] == [{"name": "text", "data_type": "TYPE_STRING", "dims": [-1]}]
        assert config["output"][2] == {"name": "logits", "data_type": "TYPE_FP32",
                                       "dims": [-1, len(sanity()["labels"])]}
    with pytest.raises(InferenceServerException) as e:
        c.get_model_config("no-such-model")
    assert "unknown model" in e.value.message()
    assert "model_configuration" in (c.get_server_metadata().extensions if kind == "grpc"
                                     else c.get_server_metadata()["extensions"])


def test_binary_tensor_data_as_tritonclient_sends_by_default(server):
    """The HTTP client's defaults: the input's bytes after the JSON (Triton's binary tensor data
    extension) and the outputs asked for as binary; answered in JSON, which the client reads."""
    c = httpclient.InferenceServerClient(url=server.hostport())
    texts, intents = batch()
    i = httpclient.InferInput("text", [len(texts)], "BYTES")
    i.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=np.object_))
    r = c.infer(MODEL, [i], outputs=[httpclient.InferRequestedOutput("label")], request_id="bin-1")
    assert [x.decode() if isinstance(x, bytes) else x for x in r.as_numpy("label")] == intents
    assert r.get_response()["id"] == "bin-1"
    # A length that the body does not hold is refused, and says why.
    i = httpclient.InferInput("text", [1], "BYTES")
    i.set_data_from_numpy(np.array([b"play some jazz"], dtype=np.object_))
    i._parameters["binary_data_size"] += 5
    with pytest.raises(InferenceServerException) as e:
        c.infer(MODEL, [i])
    assert e.value.status() == "400" and "binary_data_size" in e.value.message()
