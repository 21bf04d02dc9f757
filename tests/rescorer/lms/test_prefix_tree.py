"""The prefix-shared forest that ``torch:`` and ``onnx:`` models score N-best lists through."""

from __future__ import annotations

import numpy as np

from rescorer.lms.prefix_tree import Depth, PrefixForest, flat_output, pack_forests

BOS, EOS, V = 1, 2, 10


def pairs(depth: Depth) -> list[tuple[int, int]]:
    return list(zip(depth.nodes.tolist(), depth.targets.tolist(), strict=True))


def test_forest_of_two_trees() -> None:
    ids = [[3, 4], [3, 5], [3, 4, 6], [3], [], [3, 4]]
    offsets, flat = flat_output(ids)
    assert offsets.tolist() == [0, 3, 6, 10, 12, 13, 16] and flat.shape == (16,)
    forest = PrefixForest([[0, 1, 2, 3], [4, 5]], ids, offsets, BOS, EOS, V)
    d0, d1, d2, d3 = forest.depths
    assert d0.parents.tolist() == [0, 0] and d0.inputs.tolist() == [BOS, BOS]
    assert d0.ctx.tolist() == [0, 1]
    # depth 1: tree 0's "3" and tree 1's "3" are different nodes (other contexts)
    assert d1.parents.tolist() == [0, 1] and d1.inputs.tolist() == [3, 3]
    assert d1.ctx.tolist() == [0, 1]
    assert d2.parents.tolist() == [0, 0, 1] and d2.inputs.tolist() == [4, 5, 4]
    assert d3.parents.tolist() == [0] and d3.inputs.tolist() == [6]
    assert forest.steps == 2 + 2 + 3 + 1
    # distinct (node, target) pairs: root 0 -> 3 once for four sentences; root 1 -> </s>, 3
    assert pairs(d0) == [(0, 3), (1, EOS), (1, 3)]
    assert pairs(d1) == [(0, EOS), (0, 4), (0, 5), (1, 4)]
    assert d1.pairs(0, 1) == (0, 3) and d1.pairs(1, 2) == (3, 4)
    flat[:] = np.nan
    for depth in forest.depths:  # a pair's value: 100 * node + target
        depth.write(100.0 * depth.nodes + depth.targets, flat)
    assert not np.isnan(flat).any()
    assert flat[offsets[2] : offsets[3]].tolist() == [3, 4, 6, EOS]  # [3, 4, 6] in tree 0
    assert flat[offsets[5] : offsets[6]].tolist() == [103, 104, 202]  # [3, 4] in tree 1
    # history roots: each reads its own initial state
    own = PrefixForest([[0], [4]], ids, offsets, BOS, EOS, V, root_states=True)
    assert own.depths[0].parents.tolist() == [0, 1]


def test_chunks() -> None:
    ids = [[3]] * 5 + [[4]] * 3
    offsets = np.arange(0, 2 * len(ids) + 1, 2)
    forest = PrefixForest([[0], [1], [2, 3, 4], [5, 6, 7]], ids, offsets, BOS, EOS, V)
    depth = forest.depths[1]  # nodes of trees 0, 1, 2, 3
    assert depth.ctx.tolist() == [0, 1, 2, 3]
    assert list(depth.chunks(3)) == [(0, 3), (3, 4)]
    assert list(depth.chunks(3, by_context=True)) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    wide = PrefixForest([list(range(5))], [[i + 3] for i in range(5)], offsets, BOS, EOS, V)
    assert list(wide.depths[1].chunks(2, by_context=True)) == [(0, 2), (2, 4), (4, 5)]


def test_pack_forests() -> None:
    groups = {"a": [0, 1, 2], "b": [3], "c": [4], "d": [5]}
    assert pack_forests(groups, 3, 2, True) == [
        [("a", [0, 1, 2])],
        [("b", [3]), ("c", [4])],
        [("d", [5])],
    ]
    assert len(pack_forests(groups, 3, 2, False)) == 4
