"""Experiments and benchmarks as plug-ins: each declares its options, how it runs and how its
result reads, and the CLI builds `dbanon experiment NAME` / `dbanon bench NAME` from the
registry, as it builds `publish` options from the method registry. The CLI names none of them.

A runner's `run(session, **options)` returns the JSON-able result (what `--json` prints); its
`report(result)` returns what a person reads: tables and lines of text, no formatting library.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any

from dbanon.db import catalog
from dbanon.errors import DbanonError

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Param:
    """One option. `kind`: int, float, str, path, choice, flag (`flag` may be '--a/--b'), or a
    comma-separated list: ints or numbers (ints and floats), each value at least `low` unless
    in `also`."""

    name: str
    kind: str
    default: Any = None
    help: str = ""
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    flag: str | None = None
    also: tuple[float, ...] = ()

    @property
    def flags(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")


@dataclass
class Table:
    """A table of a report: column names and rows of text."""

    columns: Sequence[str]
    rows: list[Sequence[str]] = field(default_factory=list)
    title: str | None = None


Report = list[Table | str]


@dataclass(frozen=True)
class Runner:
    name: str
    summary: str  # the command's help
    params: tuple[Param, ...]
    run: Callable[..., dict[str, Any]]  # (session, **options) -> result
    report: Callable[[dict[str, Any]], Report]


class Session:
    """What a runner gets besides its options: the database (opened on first use, its catalog
    installed) and a progress callback."""

    def __init__(self, dsn: str | None, say: Progress = lambda _m: None) -> None:
        self.dsn = dsn
        self.say = say
        self._db: Any = None

    @property
    def db(self) -> Any:
        if self._db is None:
            from dbanon.api import Database

            self._db = Database(self.dsn)
            self._db.init()
        return self._db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()


def numbers(value: str | None, p: Param) -> list[float] | None:
    """A comma-separated list option (the one list parser): None when not given."""
    if value is None or not str(value).strip():
        return None if value is None else []
    try:
        out = [int(x) if p.kind == "ints" or "." not in x else float(x)
               for x in catalog.parse_list(str(value))]  # fmt: skip
    except ValueError:
        what = "whole numbers" if p.kind == "ints" else "numbers"
        raise DbanonError(f"{p.flags} takes {what} a,b,c, got {value!r}") from None
    bad = [x for x in out if p.low is not None and x < p.low and x not in p.also]
    if bad:
        extra = f" (or {', '.join(map(str, p.also))})" if p.also else ""
        raise DbanonError(f"{p.flags}: every value must be at least {p.low:g}{extra}, "
                          f"got {bad[0]}")  # fmt: skip
    return out


EXPERIMENTS: dict[str, Runner] = {}
BENCHES: dict[str, Runner] = {}
# Modules that register runners when imported (loaded on first use, like the methods).
_MODULES = ("dbanon.experiments.commands", "dbanon.bench.registry")


def experiment(runner: Runner) -> Runner:
    EXPERIMENTS[runner.name] = runner
    return runner


def bench(runner: Runner) -> Runner:
    BENCHES[runner.name] = runner
    return runner


def _load() -> None:
    for module in _MODULES:
        import_module(module)


def experiments() -> dict[str, Runner]:
    _load()
    return dict(sorted(EXPERIMENTS.items()))


def benches() -> dict[str, Runner]:
    _load()
    return dict(sorted(BENCHES.items()))


def wrote(data: dict[str, Any]) -> str:
    """The files an experiment wrote, as one line."""
    files = [*data.get("files", []), *([data["csv"]] if "csv" in data else []),
             *data.get("plots", [])]  # fmt: skip
    return "wrote " + ", ".join(map(str, files))
