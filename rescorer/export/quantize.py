"""Dynamic int8 quantisation of an export, and what it costs in perplexity.

:func:`quantize_int8` runs ``onnxruntime.quantization.quantize_dynamic`` (int8 weights, activations
quantised on the fly): the MatMuls with constant weights -- the input gates of layer 0, the
projection, the output layer, and with ``subgraphs=True`` the recurrent matmuls inside the Scan --
and the embedding Gather. Weights selected per context (multi-context exports) stay float32: the
quantiser does not follow the values a subgraph (If branch, Scan body) reads from the graph
around it, so the nodes that produce them are excluded. The metadata properties (which the
quantiser drops) are copied over, with ``quantization`` added; the vocabulary file stays the
float model's.

:func:`rescorer.lms.onnx.perplexity_change` scores the same sentences with both files and reports
the perplexity of each.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import onnx

from rescorer.core.output import atomic_write

logger = logging.getLogger(__name__)


class _DropHint(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Please consider to run pre-processing")


@contextlib.contextmanager
def _quiet_preprocessing_hint() -> Iterator[None]:
    """quantize_dynamic logs a hint about shape-inference pre-processing on the root logger;
    our graphs carry full shapes already, so drop it."""
    hint = _DropHint()
    root = logging.getLogger()
    root.addFilter(hint)
    try:
        yield
    finally:
        root.removeFilter(hint)


def int8_path_for(path: str | os.PathLike[str]) -> Path:
    """Where the int8 model of ``lm.onnx`` goes: ``lm.int8.onnx``."""
    path = Path(path)
    stem = path.name[: -len(".onnx")] if path.name.endswith(".onnx") else path.name
    return path.with_name(stem + ".int8.onnx")


# -- graph helpers: subgraphs (If branches, Scan bodies) read values of the graphs around them --


def _subgraphs_of(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            yield from attr.graphs


def _all_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of ``graph`` and of its subgraphs, at any depth."""
    for node in graph.node:
        yield node
        for sub in _subgraphs_of(node):
            yield from _all_nodes(sub)


def _implicit_inputs(g: onnx.GraphProto) -> set[str]:
    """Names that ``g`` (its own subgraphs included) reads but does not define."""
    local = {i.name for i in g.input} | {t.name for t in g.initializer}
    local |= {o for n in g.node for o in n.output}
    reads = {i for n in g.node for i in n.input if i}
    for node in g.node:
        reads |= _outer_reads(node)
    return reads - local


def _outer_reads(node: onnx.NodeProto) -> set[str]:
    """The implicit inputs of ``node``: what its subgraphs read from outside them."""
    names: set[str] = set()
    for sub in _subgraphs_of(node):
        names |= _implicit_inputs(sub)
    return names


def _read_by_subgraphs(graph: onnx.GraphProto) -> set[str]:
    """Every name that some subgraph, at any depth, reads from the graphs around it."""
    return {name for node in _all_nodes(graph) for name in _outer_reads(node)}


def _toposort(graph: onnx.GraphProto) -> None:
    """Order ``graph``'s nodes (and its subgraphs') so that every value, implicit subgraph
    inputs included, is produced before it is read; ties keep the current order.

    The quantiser sorts nodes by their explicit inputs only, which can put an If before a node
    whose output one of its branches reads.
    """
    nodes = list(graph.node)
    for node in nodes:
        for sub in _subgraphs_of(node):
            _toposort(sub)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    deps = [{producer[x] for x in (set(n.input) | _outer_reads(n)) if x in producer} for n in nodes]
    done: set[int] = set()
    order: list[int] = []
    while len(order) < len(nodes):
        ready = next((i for i in range(len(nodes)) if i not in done and deps[i] <= done), None)
        if ready is None:
            raise ValueError("quantized graph has a cycle; cannot order its nodes")
        done.add(ready)
        order.append(ready)
    del graph.node[:]
    graph.node.extend(nodes[i] for i in order)


def quantize_int8(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str] | None = None,
    subgraphs: bool = True,
) -> Path:
    """Write the dynamic int8 model of ``src`` to ``dst`` (default :func:`int8_path_for`)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    src = Path(src)
    dst = int8_path_for(src) if dst is None else Path(dst)
    if src.resolve() == dst.resolve():
        raise ValueError(f"quantize: source and destination are the same file ({src})")
    model = onnx.load(str(src))
    read_inside = _read_by_subgraphs(model.graph)
    exclude = [n.name for n in _all_nodes(model.graph) if set(n.output) & read_inside]
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent)
    os.close(fd)
    try:
        with _quiet_preprocessing_hint():
            quantize_dynamic(
                str(src),
                tmp,
                weight_type=QuantType.QInt8,
                nodes_to_exclude=exclude,
                extra_options={"EnableSubgraph": subgraphs},
            )
        quantized = onnx.load(tmp)
    finally:
        Path(tmp).unlink(missing_ok=True)
    _toposort(quantized.graph)
    props = {p.key: p.value for p in model.metadata_props}
    props["quantization"] = "dynamic int8 (onnxruntime quantize_dynamic, QInt8 weights)"
    onnx.helper.set_model_props(quantized, props)
    onnx.checker.check_model(quantized, full_check=True)
    with atomic_write(dst, "wb") as f:
        f.write(quantized.SerializeToString())
    logger.info(
        "wrote %s (%.1f MiB, %.1f MiB in float32)",
        dst,
        dst.stat().st_size / 2**20,
        src.stat().st_size / 2**20,
    )
    return dst
