"""Hierarchies: ARX parsing, validation errors, LCA against brute-force ancestor walks."""

from __future__ import annotations

import itertools

import pytest

from dbanon.core.hierarchy import Hierarchy, HierarchyError
from dbanon.data import hierarchy_file

ROWS = [
    ["a1", "A", "*"],
    ["a2", "A", "*"],
    ["b1", "B", "*"],
    ["b2", "B", "*"],
]


def test_structure_of_a_small_tree() -> None:
    h = Hierarchy.from_rows("t", ROWS)
    assert h.height == 2
    assert sorted(h.leaves) == ["a1", "a2", "b1", "b2"]
    assert h.labels[h.root] == "*"
    assert [h.labels[n] for n in h.ancestors(h.leaf("b2"))] == ["b2", "B", "*"]
    assert h.lca(["a1", "a2"]) == "A"
    assert h.lca(["a1", "b1"]) == "*"
    assert h.lca(["b2"]) == "b2"
    assert h.generalize("a2", 1) == "A"


def test_lca_table_matches_ancestor_walks_on_adult_hierarchies() -> None:
    for name in ("native-country", "education", "age"):
        h = Hierarchy.from_csv(name, hierarchy_file(name))
        table = h.lca_table()
        for a, b in itertools.product(range(0, len(h.labels), 3), repeat=2):
            common = [x for x in h.ancestors(a) if x in set(h.ancestors(b))]
            assert table[a, b] == common[0], (name, h.labels[a], h.labels[b])


def test_round_trip_of_rows() -> None:
    h = Hierarchy.from_csv("education", hierarchy_file("education"))
    again = Hierarchy.from_rows("education", h.rows())
    assert again.leaves.keys() == h.leaves.keys()
    assert all(again.generalize(v, 2) == h.generalize(v, 2) for v in h.leaves)


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([["a", "A", "*"], ["b", "*"]], "ragged: line 2 has 2 levels"),
        ([["a", "A", "*"], ["a", "B", "*"]], "leaf 'a' appears twice"),
        ([["a", "A", "X", "*"], ["b", "A", "Y", "*"]], "node 'A' has two parents"),
        ([["a", "A"], ["b", "B"]], "has 2 roots"),
        ([["a"]], "needs at least two columns"),
        ([], "is empty"),
        ([["a", "", "*"]], "empty label"),
    ],
)
def test_malformed_hierarchies_are_rejected(rows: list[list[str]], message: str) -> None:
    with pytest.raises(HierarchyError, match=message):
        Hierarchy.from_rows("bad", rows)


def test_unknown_leaf_is_named() -> None:
    h = Hierarchy.from_rows("t", ROWS)
    with pytest.raises(
        HierarchyError, match="value 'c9' .*column x.* not a leaf of hierarchy 't'"
    ):
        h.leaf("c9", "x")


def test_flat_hierarchy() -> None:
    h = Hierarchy.flat("f", ["x", "y", "x"])
    assert h.height == 1 and h.lca(["x", "y"]) == "*" and h.lca(["y"]) == "y"
