"""`dbanon experiment` and `dbanon bench`: commands built from the registered runners
(dbanon.bench.runners), so this module names no experiment and no benchmark.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from dbanon.bench import runners
from dbanon.cli.common import Command, Ctx, Table, fails_cleanly, group, out
from dbanon.db import catalog
from dbanon.errors import DbanonError


def _option(p: runners.Param) -> click.Option:
    """A runner's parameter as a click option (lists go through the one list parser)."""
    shown = p.default is not None and p.default is not False and p.default != ""
    kw: dict[str, Any] = {"default": p.default, "help": p.help or None, "show_default": shown}
    if p.kind in ("ints", "numbers", "words"):

        def parse(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
            if p.kind == "words":
                return catalog.parse_list(value) if value else []
            try:
                return runners.numbers(value, p)
            except DbanonError as e:
                raise click.BadParameter(str(e)) from None

        return click.Option([p.flags, p.name], type=str, callback=parse, **kw)
    if p.kind == "flag":
        pair = "/" in p.flags  # --a/--b: a boolean of two flags, click's own form
        return click.Option([p.flags, p.name], **kw, **({} if pair else {"is_flag": True}))
    kind: Any = {
        "int": click.IntRange(p.low, p.high) if (p.low, p.high) != (None, None) else int,
        "float": click.FloatRange(p.low, p.high),
        "str": str,
        "path": click.Path(file_okay=False),
        "choice": click.Choice(p.choices),
    }[p.kind]
    return click.Option([p.flags, p.name], type=kind, **kw)


def print_report(report: runners.Report) -> None:
    for part in report:
        if isinstance(part, runners.Table):
            table = Table(*part.columns, title=part.title)
            for row in part.rows:
                table.add_row(*row)
            out.print(table)
        else:
            out.print(part, markup=False)


def runner_command(r: runners.Runner) -> click.Command:
    """`dbanon experiment NAME` / `dbanon bench NAME` from a registered runner."""

    @click.pass_obj
    @fails_cleanly
    def callback(c: Ctx, **options: Any) -> None:
        with c.progress() as say:
            session = runners.Session(c.dsn, say)
            try:
                data = r.run(session, **options)
            finally:
                session.close()
        c.emit(data, lambda: print_report(r.report(data)))
        if data.get("exit"):
            sys.exit(data["exit"])

    return Command(r.name, params=[_option(p) for p in r.params], callback=callback,
                   help=r.summary)  # fmt: skip


@group()
def bench() -> None:
    """Benchmarks of the algorithms on UCI Adult and the hospital table (in memory)."""


@group()
def experiment() -> None:
    """Reproductions of the papers' experiments (CSV and PNG)."""


for _runner in runners.benches().values():
    bench.add_command(runner_command(_runner))


for _runner in runners.experiments().values():
    experiment.add_command(runner_command(_runner))
