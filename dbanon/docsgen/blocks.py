"""The registry of generated blocks: a block's name, the function that renders it, and the
helpers they share. The renderers (dbanon.docsgen.generate, dbanon.docsgen.figures) register
here; generate finds them here, so neither imports the other's registry through it."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent  # the repository
Generator = Callable[[], str]
BLOCKS: dict[str, Generator] = {}
BLOCK = re.compile(
    r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- end: (?P=name) -->)", re.S
)


def block(name: str) -> Callable[[Generator], Generator]:
    """Register a generator for the blocks named NAME."""

    def add(fn: Generator) -> Generator:
        BLOCKS[name] = fn
        return fn

    return add



def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
