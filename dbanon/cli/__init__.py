"""The `dbanon` command: parse, call the library (dbanon.api), print. Nothing else lives here.

Exit codes: 0 done (or the model holds), 1 the checked model does not hold, 2 an error, 3 busy
(another run holds the release), 4 refused, 130 interrupted by SIGINT, 143 by SIGTERM.
"""

from __future__ import annotations

import click

from dbanon.cli import audit, catalog, releases, runs, schedules
from dbanon.cli.common import Ctx, Group


@click.group(cls=Group)
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

    if ctx.get_parameter_source("dsn") == ParameterSource.ENVIRONMENT:
        dsn = None  # DBANON_DSN: the library reads it itself, and says so (`server url`)
    ctx.obj = Ctx(dsn, as_json)


main.add_command(catalog.server_group)
main.add_command(catalog.init)
main.add_command(catalog.hierarchy)
main.add_command(catalog.methods_command)
main.add_command(catalog.docs_command)
main.add_command(catalog.uninstall_command)
main.add_command(catalog.demo)
main.add_command(catalog.flags_group)
main.add_command(audit.check)
main.add_command(releases.publish)
main.add_command(releases.refresh)
main.add_command(releases.evaluate)
main.add_command(releases.report)
main.add_command(releases.compare)
main.add_command(releases.releases_command)
main.add_command(releases.drop_command)
main.add_command(releases.grant_command)
main.add_command(releases.revoke_command)
main.add_command(releases.show_command)
main.add_command(releases.export_command)
main.add_command(releases.apply_command)
main.add_command(schedules.schedule_group)
main.add_command(runs.bench)
main.add_command(runs.experiment)
