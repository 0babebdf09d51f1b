"""Graph rewrites that make the GPU (fp16) and fused CPU (int8) models from the committed int8 one.

No PyTorch and no retraining: the committed `snips-minilm-l6/model.onnx` already holds every
weight, quantized. `dequantize` turns it back into a float graph with the weights
`(W_q - W_zp) * W_scale`; `fuse_bert` applies ONNX Runtime's BERT fusions (Attention,
SkipLayerNormalization, EmbedLayerNormalization, BiasGelu); `to_fp16` converts for the GPU.

`onnxruntime.transformers.optimizer.optimize_model` would do the fusion step, but in
onnxruntime 1.31.1 it runs `optimize_by_onnxruntime`, whose first line is
`from torch import version` (to tell ROCm from CUDA when `use_gpu` is set), so it fails
without torch. `fuse_bert` does the same two steps without that import: the ONNX Runtime
session pass at the basic level that `optimize_model` runs for BERT (opt_level 1, CPU provider,
`ConstantSharing` disabled, the result written through `optimized_model_filepath`), then the
public `optimize_by_fusion`, which never imports torch.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

NUM_HEADS = 12
HIDDEN_SIZE = 384


class GraphError(RuntimeError):
    """The int8 graph does not have the shape this rewrite expects."""


def _index(model: onnx.ModelProto):
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    return inits, producer, consumers


def _only(nodes: list[onnx.NodeProto] | None, op: str, what: str) -> onnx.NodeProto:
    if not nodes or len(nodes) != 1 or nodes[0].op_type != op:
        found = [n.op_type for n in nodes or []]
        raise GraphError(f"{what}: expected one {op}, found {found}")
    return nodes[0]


def _dequantized(q: TensorProto, scale: TensorProto, zero: TensorProto, axis: int) -> np.ndarray:
    wq = numpy_helper.to_array(q).astype(np.float32)
    s = numpy_helper.to_array(scale).astype(np.float32)
    z = numpy_helper.to_array(zero).astype(np.float32)
    if s.ndim == 1:  # per channel along `axis`
        shape = [1] * wq.ndim
        shape[axis] = -1
        s, z = s.reshape(shape), z.reshape(shape)
    return (wq - z) * s


def dequantize(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, int]]:
    """The float graph of a `quantize_dynamic` model: every
    `DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul(scale_x * scale_w)` becomes one
    `MatMul` with the float weight, and every quantized embedding
    `Gather(W_q) -> DequantizeLinear` a `Gather` on the float table. Returns the model and the
    number of each rewrite."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    inits, producer, consumers = _index(model)
    drop: set[int] = set()  # ids of removed nodes
    new_inits: dict[str, TensorProto] = {}
    counts = {"MatMulInteger": 0, "Gather": 0}
    replace: dict[int, onnx.NodeProto] = {}

    for node in graph.node:
        if node.op_type == "MatMulInteger":
            a_q, w_q, _a_zp, w_zp = node.input
            if w_q not in inits or w_zp not in inits:
                raise GraphError(f"{node.name}: weight is not an initializer")
            dql = producer.get(a_q)
            if dql is None or dql.op_type != "DynamicQuantizeLinear":
                raise GraphError(f"{node.name}: input not from DynamicQuantizeLinear")
            cast = _only(consumers.get(node.output[0]), "Cast", node.name)
            mul = _only(consumers.get(cast.output[0]), "Mul", cast.name)
            scales = producer.get(mul.input[1])
            if scales is None or scales.op_type != "Mul":
                raise GraphError(f"{mul.name}: scale is not a Mul")
            w_scale = next((i for i in scales.input if i in inits), None)
            if w_scale is None or scales.input[0] != dql.output[1]:
                raise GraphError(f"{scales.name}: not scale_x * scale_w")
            name = w_q.removesuffix("_quantized") + "_dequantized"
            if name not in new_inits:
                w = _dequantized(inits[w_q], inits[w_scale], inits[w_zp], axis=1)
                new_inits[name] = numpy_helper.from_array(w, name)
            matmul = helper.make_node("MatMul", [dql.input[0], name], [mul.output[0]],
                                      name=node.name.removesuffix("_quant"))
            replace[id(node)] = matmul
            drop.update({id(cast), id(mul), id(scales)})
            counts["MatMulInteger"] += 1
        elif node.op_type == "DequantizeLinear":
            gather = producer.get(node.input[0])
            if gather is None or gather.op_type != "Gather" or gather.input[0] not in inits:
                raise GraphError(f"{node.name}: not a quantized embedding lookup")
            axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
            table = gather.input[0]
            name = table.removesuffix("_quantized")
            w = _dequantized(inits[table], inits[node.input[1]], inits[node.input[2]], axis)
            new_inits[name] = numpy_helper.from_array(w, name)
            lookup = helper.make_node("Gather", [name, gather.input[1]], [node.output[0]],
                                      name=gather.name, axis=next(
                                          (a.i for a in gather.attribute if a.name == "axis"), 0))
            replace[id(node)] = lookup
            drop.add(id(gather))
            counts["Gather"] += 1

    nodes = [replace.get(id(n), n) for n in graph.node if id(n) not in drop]
    # DynamicQuantizeLinear nodes (one may feed Q, K and V) and other nodes whose outputs nobody
    # reads any more: sweep backwards until nothing changes.
    outputs = {o.name for o in graph.output}
    while True:
        used = {i for n in nodes for i in n.input} | outputs
        kept = [n for n in nodes if any(o in used for o in n.output)]
        if len(kept) == len(nodes):
            break
        nodes = kept
    del graph.node[:]
    graph.node.extend(nodes)
    used = {i for n in nodes for i in n.input}
    keep = [t for t in graph.initializer if t.name in used]
    keep += [t for name, t in new_inits.items() if name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    left = [n.op_type for n in nodes if n.op_type in
            ("MatMulInteger", "DynamicQuantizeLinear", "DequantizeLinear", "QuantizeLinear")]
    if left:
        raise GraphError(f"quantized nodes left after the rewrite: {left}")
    model.producer_name, model.producer_version = "snips-minilm-l6 dequantize", "1"
    onnx.checker.check_model(model)
    return model, counts


def fuse_bert(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, int]]:
    """ONNX Runtime's BERT fusions without `optimize_model`'s torch import (see the module doc).
    Returns the fused float model and the count of each fused operator."""
    import onnxruntime as ort
    from onnxruntime.transformers.optimizer import optimize_by_fusion

    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "basic.onnx")
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        opts.optimized_model_filepath = path
        ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"],
                             disabled_optimizers=["ConstantSharing"])
        basic = onnx.load(path)
    basic.producer_name = ""  # optimize_by_fusion warns unless empty or "pytorch"
    fused = optimize_by_fusion(basic, model_type="bert", num_heads=NUM_HEADS,
                               hidden_size=HIDDEN_SIZE)
    stats = {k: v for k, v in fused.get_fused_operator_statistics().items() if v}
    return fused.model, stats


def to_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """fp16 weights and activations, int64 inputs and float32 `logits` kept
    (`keep_io_types`), as the worker requires."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    return convert_float_to_float16(onnx.ModelProto.FromString(model.SerializeToString()),
                                    keep_io_types=True)


def io_signature(model: onnx.ModelProto) -> list[tuple]:
    """(name, element type, dims) of every graph input and output."""
    sig = []
    for value in list(model.graph.input) + list(model.graph.output):
        t = value.type.tensor_type
        dims = tuple(d.dim_param or d.dim_value for d in t.shape.dim)
        sig.append((value.name, TensorProto.DataType.Name(t.elem_type), dims))
    return sig


def op_counts(model: onnx.ModelProto) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n in model.graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return dict(sorted(counts.items()))
