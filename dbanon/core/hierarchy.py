"""Generalisation hierarchies (taxonomy trees) for categorical quasi-identifiers.

The file format is ARX's: one line per leaf, `value;level1;...;*`, no header. Every line has the
same depth, so a node is identified by (level, label) and the height of the subtree under a node is
its level; that is what makes the k-member distance H(A(x, y)) / H(T) a table lookup.
Numeric attributes need no hierarchy: they generalise to [min, max] ranges.
"""

from __future__ import annotations

import csv
import hashlib
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from dbanon.errors import quote_ident, quote_name

if TYPE_CHECKING:  # numpy is imported where a table is built: `dbanon check` never needs it
    import numpy as np


class HierarchyError(ValueError):
    """A hierarchy file or value that cannot be used; the message names the culprit."""


def _rows(f: Iterable[str], where: object) -> list[list[str]]:
    """The `;`-separated rows of an open file; what csv cannot read (a field past its size
    limit), or a stream that is not UTF-8, is one line naming the file."""
    try:
        return list(csv.reader(f, delimiter=";"))
    except (csv.Error, UnicodeDecodeError) as e:
        raise HierarchyError(f"cannot read hierarchy file {str(where)!r}: {e}") from None


@dataclass(frozen=True)
class Hierarchy:
    """A balanced taxonomy tree; node ids are indexes into `labels`, leaves first."""

    name: str
    labels: tuple[str, ...]
    levels: tuple[int, ...]
    parents: tuple[int, ...]  # -1 for the root
    leaves: dict[str, int] = field(repr=False)

    @property
    def height(self) -> int:
        return max(self.levels)

    @property
    def root(self) -> int:
        return self.parents.index(-1)

    @cached_property
    def version(self) -> str:
        """A hash of the content (its leaf-to-root rows, by leaf): what a release records as
        the hierarchy it was verified with. Migration 0009 computes the same in SQL (labels
        joined by U+001F, rows by U+001E in code point order of the leaf, SHA-256 hex)."""
        text = "\x1e".join("\x1f".join(row) for row in sorted(self.rows()))
        return hashlib.sha256(text.encode()).hexdigest()

    @classmethod
    def from_rows(cls, name: str, rows: Sequence[Sequence[str]]) -> Hierarchy:
        """Build and validate a hierarchy from leaf-to-root rows."""
        rows = [[cell.strip() for cell in row] for row in rows if any(c.strip() for c in row)]
        if not rows:
            raise HierarchyError(f"hierarchy {quote_name(name)} is empty")
        depth = len(rows[0])
        if depth < 2:
            raise HierarchyError(
                f"hierarchy {quote_name(name)} needs at least two columns (value;...;*), line 1 "
                f"has {depth}"
            )
        ids: dict[tuple[int, str], int] = {}
        labels: list[str] = []
        levels: list[int] = []
        parents: list[int] = []
        # Leaves first, then level by level, so a node's id orders it by level.
        for level in range(depth):
            for lineno, row in enumerate(rows, 1):
                if len(row) != depth:
                    raise HierarchyError(
                        f"hierarchy {quote_name(name)} is ragged: line {lineno} has {len(row)} "
                        f"levels, line 1 has {depth}"
                    )
                if any(cell == "" for cell in row):
                    raise HierarchyError(f"hierarchy {quote_name(name)} line {lineno} has an "
                        "empty label")
                key = (level, row[level])
                if key in ids:
                    if level == 0:
                        raise HierarchyError(
                            f"hierarchy {quote_name(name)}: leaf {row[0]!r} appears twice (line "
                            f"{lineno})"
                        )
                    continue
                ids[key] = len(labels)
                labels.append(row[level])
                levels.append(level)
                parents.append(-1)
        for lineno, row in enumerate(rows, 1):
            for level in range(depth - 1):
                child, parent = ids[(level, row[level])], ids[(level + 1, row[level + 1])]
                if parents[child] not in (-1, parent):
                    raise HierarchyError(
                        f"hierarchy {quote_name(name)}: node {row[level]!r} has two parents, "
                        f"{labels[parents[child]]!r} and {row[level + 1]!r} (line {lineno})"
                    )
                parents[child] = parent
        roots = [labels[i] for i, lv in enumerate(levels) if lv == depth - 1]
        if len(roots) != 1:
            raise HierarchyError(
                f"hierarchy {quote_name(name)} has {len(roots)} roots "
                f"({', '.join(map(repr, roots[:3]))}); "
                "the last column must be the same on every line"
            )
        leaves = {labels[i]: i for i, lv in enumerate(levels) if lv == 0}
        return cls(name, tuple(labels), tuple(levels), tuple(parents), leaves)

    @classmethod
    def from_csv(cls, name: str, source: str | Path | io.TextIOBase) -> Hierarchy:
        """Read ARX's `value;level1;...;*` format from a path or an open text file."""
        if isinstance(source, (str, Path)):
            try:
                data = Path(source).read_bytes()
            except OSError as e:
                raise HierarchyError(
                    f"cannot read hierarchy file {str(source)!r}: {e.strerror}"
                ) from None
            try:
                # utf-8-sig: a byte-order mark (Excel's "CSV UTF-8") is not part of the first leaf
                text = data.decode("utf-8-sig")
            except UnicodeDecodeError as e:  # a Latin-1 or UTF-16 export: say where, not a trace
                line = data[: e.start].count(b"\n") + 1
                raise HierarchyError(
                    f"hierarchy file {str(source)!r} is not UTF-8: byte 0x{data[e.start]:02x} on "
                    f"line {line}; save it as UTF-8 (iconv -t UTF-8) and import it again"
                ) from None
            if "\0" in text:  # valid UTF-8, but no PostgreSQL text: UTF-16 without its mark
                line = text[: text.index("\0")].count("\n") + 1
                raise HierarchyError(
                    f"hierarchy file {str(source)!r} holds a NUL byte on line {line} (UTF-16?); "
                    "save it as UTF-8 and import it again"
                )
            return cls.from_rows(name, _rows(io.StringIO(text, newline=""), source))
        rows = _rows(source, getattr(source, "name", "<stream>"))
        if rows and rows[0] and rows[0][0].startswith("\ufeff"):
            rows[0][0] = rows[0][0][1:]
        return cls.from_rows(name, rows)

    @classmethod
    def flat(cls, name: str, values: Iterable[str]) -> Hierarchy:
        """The hierarchy of a categorical QI given none: every value generalises to `*`."""
        return cls.from_rows(name, [[v, "*"] for v in sorted(set(values))])

    def leaf(self, value: str, column: str | None = None) -> int:
        """Node id of a leaf value, or a HierarchyError that names the value."""
        try:
            return self.leaves[value]
        except KeyError:
            where = f" (column {quote_ident(column)})" if column else ""
            raise HierarchyError(
                f"value {value!r}{where} is not a leaf of hierarchy {quote_name(self.name)}"
            ) from None

    def ancestors(self, node: int) -> list[int]:
        """The node and its ancestors up to the root, one per level."""
        path = [node]
        while self.parents[path[-1]] != -1:
            path.append(self.parents[path[-1]])
        return path

    def ancestor_table(self) -> np.ndarray:
        """int32[m, height+1]: the ancestor of each node at each level (-1 below the node)."""
        import numpy as np

        table = np.full((len(self.labels), self.height + 1), -1, dtype=np.int32)
        for node in range(len(self.labels)):
            for anc in self.ancestors(node):
                table[node, self.levels[anc]] = anc
        return table

    def lca_table(self) -> np.ndarray:
        """int32[m, m]: the lowest common ancestor of every pair of nodes."""
        import numpy as np

        anc = self.ancestor_table()
        m = len(self.labels)
        lca = np.empty((m, m), dtype=np.int32)
        for a in range(m):
            for b in range(m):
                start = max(self.levels[a], self.levels[b])
                level = start
                while anc[a, level] != anc[b, level]:
                    level += 1
                lca[a, b] = anc[a, level]
        return lca

    def lca(self, values: Iterable[str]) -> str:
        """Label of the lowest common ancestor of a set of leaf values."""
        nodes = {self.leaf(v) for v in values}
        anc = self.ancestor_table()
        for level in range(self.height + 1):
            if len({anc[n, level] for n in nodes}) == 1:
                return self.labels[anc[next(iter(nodes)), level]]
        raise AssertionError("a validated hierarchy has one root")

    def generalize(self, value: str, level: int) -> str:
        """The label of `value` at `level` (0 = the value itself)."""
        return self.labels[self.ancestors(self.leaf(value))[level]]

    def rows(self) -> list[list[str]]:
        """The leaf-to-root rows, as in the ARX file."""
        return [[self.labels[a] for a in self.ancestors(leaf)] for leaf in self.leaves.values()]
