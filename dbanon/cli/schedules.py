"""`dbanon schedule`: when releases refresh, and the cron line or systemd units that
run them.
"""

from __future__ import annotations

import click

from dbanon.cli.common import Ctx, DefaultGroup, Table, fails_cleanly, group, out


@group("schedule", cls=DefaultGroup)
def schedule_group() -> None:
    """When `dbanon refresh --due` refreshes each release.

    `dbanon schedule NAME --every '6 hours'` (or `--cron '0 3 * * *'`) is short for `dbanon
    schedule set NAME ...`."""


@schedule_group.command("set")
@click.argument("name")
@click.option("--every", help="An interval: '6 hours', '1 day'.")
@click.option("--cron", "cron_", help="A cron expression: '0 3 * * *'.")
@click.pass_obj
@fails_cleanly
def schedule_set(c: Ctx, name: str, every: str | None, cron_: str | None) -> None:
    """Schedule release NAME (replacing its schedule)."""
    with c.db() as db:
        data = db.schedule(name, every=every, cron=cron_)
    c.emit(data, lambda: click.echo(f"{name}: every {every}" if every else f"{name}: {cron_}"))


@schedule_group.command("clear")
@click.argument("name")
@click.pass_obj
@fails_cleanly
def schedule_clear(c: Ctx, name: str) -> None:
    """Remove release NAME's schedule."""
    with c.db() as db:
        cleared = db.unschedule(name)
    c.emit({"release": name, "cleared": cleared}, lambda: click.echo(f"{name}: unscheduled"))


@schedule_group.command("list")
@click.pass_obj
@fails_cleanly
def schedule_list(c: Ctx) -> None:
    """Every schedule, the latest run and when each release is next due."""
    with c.db() as db:
        rows = db.schedules()

    def human() -> None:
        table = Table("release", "schedule", "last run", "next due")
        for r in rows:
            when = f"every {r['every']}" if r["every"] else r["cron"]
            table.add_row(r["release"], when, r["last_run_at"] or "-", r["next_due_at"] or "now")
        out.print(table)

    c.emit({"schedules": rows}, human)


@schedule_group.command("install")
@click.option("--cron", "kind", flag_value="cron", help="A crontab line.")
@click.option("--systemd", "kind", flag_value="systemd", help="A systemd service and timer.")
@click.option(
    "--write", type=click.Path(file_okay=False),
    help="Write the units into DIR (and the password beside them).",
)  # fmt: skip
@click.option(
    "--save-password", "save", is_flag=True,
    help="Store the server's password for the job in the passfile (one line per server).",
)  # fmt: skip
@click.pass_obj
@fails_cleanly
def schedule_install(c: Ctx, kind: str | None, write: str | None, save: bool) -> None:
    """Print (or write) what runs `dbanon refresh --due` every few minutes, against the server
    this command reaches (connected to first: exit 2 if it cannot be). A password never goes
    into the job: --save-password (or --write) stores it in a passfile of mode 0600, one line
    per server (host, port, database, user), as ~/.pgpass; printing alone writes nothing."""
    from dbanon.lifecycle import schedule as sched

    data = sched.install(kind or "", c.dsn, write, save=save)

    def human() -> None:
        if "cron" in data:
            click.echo(data["cron"], nl=False)
        elif "written" in data:
            click.echo("\n".join(data["written"]))
        else:
            for name, text in data["units"].items():
                click.echo(f"# {name}\n{text}")
        click.echo(f"# the job reaches the server chosen by {data['server']}", err=True)
        pw = data["password"]
        if pw["saved"]:
            click.echo(f"# stored the password of {pw['entry']} in {pw['passfile']} (mode 0600)",
                       err=True)  # fmt: skip
        elif pw["needed"]:
            click.echo(f"# the job needs the password of {pw['entry']}: add --save-password to "
                       f"store it in {pw['passfile']} (mode 0600)", err=True)  # fmt: skip

    c.emit(data, human)
