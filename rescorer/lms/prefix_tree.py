"""Prefix-shared forests of sentences: how ``torch:`` and ``onnx:`` models score N-best lists.

The hypotheses of one context form a prefix tree (trie): one node per distinct prefix
``<s> u1 .. uk``. Several trees -- one per context -- make a forest, which a recurrent model runs
breadth-first, one depth at a time: every node of a depth (across the trees) is one step from
its parent's state, reading its last unit. A node's output distribution scores its children's
units and, for the sentences that end there, ``</s>``. So each distinct prefix is computed once
and each distinct (prefix, next unit) pair is scored once.

:class:`PrefixForest` builds the forest from unit ids (numpy only); :class:`Depth` holds one
depth's nodes and the pairs scored at them; :func:`pack_forests` packs context groups into
forests and :func:`flat_output` lays out the values they fill. The adapters
(:class:`rescorer.lms.torch.TorchLM`, :class:`rescorer.lms.onnx.OnnxLM`) run the steps with
their own runtime.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Depth:
    """The nodes of one depth of a forest and the sentence positions scored at them.

    All arrays are int64. Nodes are in tree order (``ctx`` is non-decreasing).
    """

    # (n,) each node's parent: its index in the previous depth's nodes; at depth 0 (the roots,
    # ``<s>``) the row of the initial states (0 for all: one zero state; or the tree's number).
    parents: np.ndarray
    # (n,) the unit each node reads (its last unit; ``<s>`` for a root).
    inputs: np.ndarray
    # (n,) the number in the forest of each node's tree (its context).
    ctx: np.ndarray
    # (u,) the distinct (node, target) pairs scored at this depth, sorted by node: the node,
    nodes: np.ndarray
    # (u,) and the target unit (the next unit, or ``</s>``).
    targets: np.ndarray
    # (p,) the pair of each sentence position scored here,
    back: np.ndarray
    # (p,) and that position's index in the flat output.
    pos: np.ndarray

    def __len__(self) -> int:
        return len(self.parents)

    def chunks(self, batch: int, by_context: bool = False) -> Iterator[tuple[int, int]]:
        """Node ranges ``[a, b)`` of at most ``batch`` nodes, in order; ``by_context``: each of
        one tree only (for a runtime whose mixed-context batches cost more than several runs)."""
        cuts = [0, len(self)]
        if by_context:
            cuts[1:1] = (np.flatnonzero(np.diff(self.ctx)) + 1).tolist()
        for start, end in zip(cuts[:-1], cuts[1:], strict=True):
            for a in range(start, end, batch):
                yield a, min(end, a + batch)

    def pairs(self, a: int, b: int) -> tuple[int, int]:
        """The slice ``[lo, hi)`` of the pairs whose node is in ``[a, b)``."""
        lo, hi = np.searchsorted(self.nodes, [a, b])
        return int(lo), int(hi)

    def write(self, values: np.ndarray, flat: np.ndarray) -> None:
        """Put each pair's value (``values`` (u,), in pair order) at its sentence positions."""
        flat[self.pos] = values[self.back]


class PrefixForest:
    """The prefix trees of ``trees`` (one list of sentence numbers per tree) over ``ids`` (each
    sentence's unit ids), as :class:`Depth` objects: ``depths[k]`` holds the distinct prefixes
    of ``k`` units. ``offsets[s]`` is sentence ``s``'s first position in the flat output
    (``len(ids[s]) + 1`` positions each: its units and ``</s>``); ``vocab`` bounds the unit
    ids. ``root_states``: root ``i`` reads initial state row ``i`` (else all read row 0).
    """

    def __init__(
        self,
        trees: Sequence[Sequence[int]],
        ids: Sequence[Sequence[int]],
        offsets: np.ndarray,
        bos: int,
        eos: int,
        vocab: int,
        root_states: bool = False,
    ) -> None:
        n_trees = len(trees)
        parents: list[list[int]] = [list(range(n_trees)) if root_states else [0] * n_trees]
        inputs: list[list[int]] = [[bos] * n_trees]
        ctx: list[list[int]] = [list(range(n_trees))]
        children: list[dict[tuple[int, int], int]] = [{}]
        rows: list[list[int]] = [[]]
        tgts: list[list[int]] = [[]]
        pos: list[list[int]] = [[]]
        for root, members in enumerate(trees):
            for s in members:
                units = ids[s]
                base = int(offsets[s])
                node = root
                for depth, tok in enumerate(units):
                    rows[depth].append(node)
                    tgts[depth].append(tok)
                    pos[depth].append(base + depth)
                    nxt = depth + 1
                    if nxt == len(parents):
                        for table in (parents, inputs, ctx, rows, tgts, pos):
                            table.append([])
                        children.append({})
                    level = children[nxt]
                    child = level.get((node, tok))
                    if child is None:
                        child = len(parents[nxt])
                        level[(node, tok)] = child
                        parents[nxt].append(node)
                        inputs[nxt].append(tok)
                        ctx[nxt].append(root)
                    node = child
                rows[len(units)].append(node)
                tgts[len(units)].append(eos)
                pos[len(units)].append(base + len(units))
        self.depths: list[Depth] = []
        for k in range(len(parents)):
            # A (node, target) pair as one number: np.unique sorts by node, then target.
            pairs = np.asarray(rows[k], dtype=np.int64) * vocab
            pairs += np.asarray(tgts[k], dtype=np.int64)
            unique, back = np.unique(pairs, return_inverse=True)
            nodes, targets = np.divmod(unique, vocab)
            self.depths.append(
                Depth(
                    np.asarray(parents[k], dtype=np.int64),
                    np.asarray(inputs[k], dtype=np.int64),
                    np.asarray(ctx[k], dtype=np.int64),
                    nodes,
                    targets,
                    back.reshape(-1),
                    np.asarray(pos[k], dtype=np.int64),
                )
            )

    @property
    def steps(self) -> int:
        """The nodes of the forest: the model steps a run computes."""
        return sum(len(d) for d in self.depths)


def flat_output(ids: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """The flat output of the sentences ``ids``: each sentence's first position (``offsets``
    (n + 1,) int64, ``len(ids[s]) + 1`` positions each: its units and ``</s>``) and the values,
    float64, to be filled."""
    offsets = np.zeros(len(ids) + 1, dtype=np.int64)
    np.cumsum([len(s) + 1 for s in ids], out=offsets[1:])
    return offsets, np.empty(int(offsets[-1]), dtype=np.float64)


def pack_forests(
    groups: dict[K, list[int]], batch: int, max_trees: int, per_context: bool
) -> list[list[tuple[K, list[int]]]]:
    """Context groups (key -> sentence numbers) packed into forests, each run depth by depth.

    A group of at least ``batch`` sentences fills batches by itself and gets a forest of its own
    (so a runtime can run it with its context folded into shared weights). Smaller groups --
    many contexts with a few sentences each, e.g. every utterance with its own previous-utterance
    context -- are packed up to ``max_trees`` per forest, each node under its own context.
    ``per_context`` False (a model whose steps do not depend on the context): one forest each.
    """
    forests: list[list[tuple[K, list[int]]]] = []
    small: list[tuple[K, list[int]]] = []
    for key, members in groups.items():
        if len(members) >= batch or not per_context:
            forests.append([(key, members)])
        else:
            small.append((key, members))
    for a in range(0, len(small), max_trees):
        forests.append(small[a : a + max_trees])
    return forests
