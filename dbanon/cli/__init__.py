"""The `dbanon` command: parse, call the library (dbanon.api), print. Nothing else lives here.

Exit codes: 0 done (or the model holds), 1 the checked model does not hold, 2 an error, 3 busy
(another run holds the release), 4 refused, 130 interrupted by SIGINT, 143 by SIGTERM.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from dbanon.cli.common import Ctx, Group
from dbanon.db.memory import exit_without_teardown

# Each command and the module of dbanon.cli that defines it, with its attribute there. A command's
# module is imported only when that command runs: `dbanon check` starts without loading what
# publishing needs (a third of its start-up), and a cron's `refresh --due` without the audits'.
COMMANDS = {
    "server": ("catalog", "server_group"), "init": ("catalog", "init"),
    "hierarchy": ("catalog", "hierarchy"), "methods": ("catalog", "methods_command"),
    "docs": ("catalog", "docs_command"), "uninstall": ("catalog", "uninstall_command"),
    "demo": ("catalog", "demo"), "flags": ("catalog", "flags_group"),
    "check": ("audit", "check"),
    "publish": ("releases", "publish"), "refresh": ("releases", "refresh"),
    "evaluate": ("releases", "evaluate"), "report": ("releases", "report"),
    "compare": ("releases", "compare"), "releases": ("releases", "releases_command"),
    "drop": ("releases", "drop_command"), "grant": ("releases", "grant_command"),
    "revoke": ("releases", "revoke_command"), "show": ("releases", "show_command"),
    "budget": ("releases", "budget_command"),
    "export": ("releases", "export_command"), "apply": ("releases", "apply_command"),
    "schedule": ("schedules", "schedule_group"),
    "bench": ("runs", "bench"), "experiment": ("runs", "experiment"),
}  # fmt: skip


class Main(Group):
    """The top group: its commands come from COMMANDS, each module imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:  # noqa: D102
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:  # noqa: D102
        if name not in COMMANDS:
            return None
        module, attribute = COMMANDS[name]
        found: Any = getattr(importlib.import_module(f"dbanon.cli.{module}"), attribute)
        return found


@click.group(cls=Main)
@click.option(
    "--dsn",
    envvar="DBANON_DSN",
    help="PostgreSQL DSN (default: $DBANON_DSN, else libpq's PGHOST/PGHOSTADDR/PGSERVICE "
    "environment, else the embedded server).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.version_option(package_name="dbanon")
@click.pass_context
def main(ctx: click.Context, dsn: str | None, as_json: bool) -> None:
    """Publish anonymised releases of PostgreSQL tables."""
    from click.core import ParameterSource

    from dbanon.db.memory import return_freed_memory

    return_freed_memory()  # the process is the command's: its peak memory is ours to keep low

    if ctx.get_parameter_source("dsn") == ParameterSource.ENVIRONMENT:
        dsn = None  # DBANON_DSN: the library reads it itself, and says so (`server url`)
    ctx.obj = Ctx(dsn, as_json)


def run() -> None:
    """The `dbanon` command as a process (its console script and `python -m dbanon`): `main`,
    then an exit without the interpreter's teardown (dbanon.db.memory.exit_without_teardown)."""
    try:
        main()
        code: object = 0
    except SystemExit as e:
        code = 0 if e.code is None else e.code
    exit_without_teardown(code)
