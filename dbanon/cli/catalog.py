"""The catalog and the embedded server: `init`, `server`, `hierarchy`, `flags`, `methods`,
`docs`, `demo`.
"""

from __future__ import annotations

import sys

import click

from dbanon import methods
from dbanon.api import Database
from dbanon.cli.common import Ctx, Table, command, fails_cleanly, group, out, qi_list
from dbanon.cli.releases import print_publish
from dbanon.db import catalog, server
from dbanon.errors import DbanonError, quote_name


@group("server")
def server_group() -> None:
    """The embedded PostgreSQL server (used when no DSN is given)."""


@server_group.command("url")
@click.pass_obj
@fails_cleanly
def server_url(c: Ctx) -> None:
    """Print the DSN of the server in use (starting the embedded one if needed); on stderr,
    where it came from: --dsn, then DBANON_DSN, then libpq's environment, then embedded."""
    from dbanon.db.connection import PRECEDENCE, choose

    dsn, source = choose(c.dsn)
    if not dsn:  # libpq's environment: show what it resolves to (never a password)
        with Database(dsn) as db:
            dsn = db.conn.info.dsn
    data = {"dsn": dsn, "source": source, "precedence": PRECEDENCE}

    def human() -> None:
        click.echo(dsn)
        click.echo(f"from {source}; precedence: {PRECEDENCE}", err=True)

    c.emit(data, human)


@server_group.command("status")
@click.pass_obj
def server_status(c: Ctx) -> None:
    """Say whether the embedded server runs, and where its data lives."""
    pid = server.running_pid()
    data = {"running": pid is not None, "pid": pid, "data_dir": str(server.data_dir())}
    c.emit(
        data,
        lambda: click.echo(
            f"{'running (pid ' + str(pid) + ')' if pid else 'stopped'}: {data['data_dir']}"
        ),
    )


@server_group.command("stop")
@click.pass_obj
def server_stop(c: Ctx) -> None:
    """Stop the embedded server."""
    stopped = server.stop()
    c.emit({"stopped": stopped}, lambda: click.echo("stopped" if stopped else "not running"))


@command()
@click.pass_obj
@fails_cleanly
def init(c: Ctx) -> None:
    """Create or upgrade the dbanon catalog schema (Alembic migrations)."""
    with c.db() as db:
        revision = db.init()
    c.emit({"revision": revision}, lambda: click.echo(f"catalog at revision {revision}"))


@group()
def hierarchy() -> None:
    """Generalisation hierarchies in the catalog."""


@hierarchy.command("import")
@click.argument("name")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--replace", is_flag=True, help="Replace a hierarchy of the same name.")
@click.option(
    "--force", is_flag=True,
    help="With --replace: replace it although releases use it (each keeps the version it was "
    "verified with until its next refresh).",
)  # fmt: skip
@click.pass_obj
@fails_cleanly
def hierarchy_import(c: Ctx, name: str, file: str, replace: bool, force: bool) -> None:
    """Import an ARX hierarchy file (value;level1;...;*) as NAME."""
    if force and not replace:
        raise DbanonError("--force only applies with --replace")
    with c.db() as db:
        h, stored = db.import_hierarchy(name, file, replace=replace, force=force, stored=True)
    data = {"name": name, "leaves": len(h.leaves), "height": h.height, **stored}

    def human() -> None:
        click.echo(f"imported hierarchy {quote_name(name)}: {len(h.leaves)} values, "
                   f"height {h.height}{'' if stored['changed'] else ' (unchanged)'}")
        if stored["changed"] and stored["releases"]:
            users = ", ".join(map(quote_name, stored["releases"]))
            click.echo(f"{users} take it at their next refresh")

    c.emit(data, human)


@hierarchy.command("list")
@click.pass_obj
@fails_cleanly
def hierarchy_list(c: Ctx) -> None:
    """List the hierarchies in the catalog."""
    with c.db() as db:
        rows = db.hierarchies()

    def human() -> None:
        table = Table("name", "height", "leaves", "nodes", "version")
        for r in rows:
            table.add_row(r["name"], str(r["height"]), str(r["leaves"]), str(r["nodes"]),
                          r["version"][:12])  # fmt: skip
        out.print(table)

    c.emit({"hierarchies": rows}, human)


@hierarchy.command("show")
@click.argument("name")
@click.pass_obj
@fails_cleanly
def hierarchy_show(c: Ctx, name: str) -> None:
    """Print hierarchy NAME as ARX rows (value;level1;...;*) and the releases that use it."""
    with c.db() as db:
        data = db.hierarchy(name)

    def human() -> None:
        for row in data["rows"]:
            click.echo(";".join(row))
        if data["used_by"]:
            click.echo(f"# used by: {', '.join(map(quote_name, data['used_by']))}", err=True)
        click.echo(f"# version: {data['version']}", err=True)
        for release, version in data["pinned_by"].items():
            if version != data["version"]:
                click.echo(f"# release {quote_name(release)} uses version {version} until its "
                           "next refresh", err=True)  # fmt: skip

    c.emit(data, human)


@hierarchy.command("drop")
@click.argument("name")
@click.pass_obj
@fails_cleanly
def hierarchy_drop(c: Ctx, name: str) -> None:
    """Remove hierarchy NAME from the catalog (refused while a release uses it)."""
    with c.db() as db:
        db.drop_hierarchy(name)
    c.emit({"dropped": name}, lambda: click.echo(f"dropped hierarchy {quote_name(name)}"))


@command("methods")
@click.option("--markdown", is_flag=True, help="The README's method table.")
@click.option("--releases", is_flag=True, help="The table of what each method releases.")
@click.pass_obj
def methods_command(c: Ctx, markdown: bool, releases: bool) -> None:
    """The publishing methods: what each promises and its own options."""
    data = {"methods": [m.describe() for m in methods.methods().values()]}
    if markdown or releases:
        click.echo(methods.markdown_table() if markdown else methods.releases_table())
        return

    def human() -> None:
        for m in data["methods"]:
            out.print(f"[bold]{m['name']}[/]: {m['summary']}")
            out.print(f"  promises: {', '.join(m['promises'])}", markup=False)
            for o in m["options"]:
                choices = f" ({'|'.join(o['choices'])})" if o["choices"] else ""
                out.print(f"  {o['flag']}{choices}: {o['help']}", markup=False)

    c.emit(data, human)


@command("docs")
@click.option("--check", is_flag=True, help="Exit 1 naming the files whose blocks are stale.")
@click.pass_obj
def docs_command(c: Ctx, check: bool) -> None:
    """Regenerate the generated blocks of README.md and docs/ (tables, figures, CLI reference)."""
    from dbanon.docsgen import generate as docgen

    files = docgen.stale() if check else docgen.write()
    key = "stale" if check else "changed"
    c.emit({key: files}, lambda: click.echo("\n".join(files) or "up to date"))
    if check and files:
        raise SystemExit(1)


@command("uninstall")
@click.option("--yes", is_flag=True, help="Do not ask.")
@click.pass_obj
@fails_cleanly
def uninstall_command(c: Ctx, yes: bool) -> None:
    """Drop every release (its released relations), then the dbanon catalog itself."""
    if not yes:
        if c.json or not sys.stdin.isatty():
            raise DbanonError("uninstall needs --yes when nobody can be asked")
        click.confirm("drop every release and the dbanon catalog?", abort=True)
    with c.db() as db:
        data = db.uninstall()

    def human() -> None:
        for name, rels in data["releases"].items():
            click.echo(f"dropped release {quote_name(name)}: {', '.join(rels) or 'no relations'}")
        click.echo("dropped the dbanon catalog (schema dbanon)")
        if data["schemas_left"]:
            click.echo(f"left the target schemas: {', '.join(data['schemas_left'])}")

    c.emit(data, human)


@command()
@click.option("--k", type=int, default=10, show_default=True)
@click.option(
    "--dataset",
    type=click.Choice(["adult", "hospital"]),
    default="adult",
    show_default=True,
    help="UCI Adult (k-member release) or the generated hospital table ((θ,k) release, θ=3).",
)
@click.option(
    "--rows",
    type=click.IntRange(1),
    help="Patients to generate (--dataset hospital; default 30000).",
)
@click.pass_obj
@fails_cleanly
def demo(c: Ctx, k: int, dataset: str, rows: int | None) -> None:
    """Load a demo table and publish a release of it (Adult: k-member; hospital: (θ,k))."""
    from dbanon.data.hospital import HOSPITAL_QI, HOSPITAL_ROWS
    from dbanon.demo import DEMO_QI, DEMO_THETA, run_demo, run_hospital_demo

    if dataset == "adult" and rows is not None:
        raise DbanonError("--rows applies to --dataset hospital (Adult has its 45,222 rows)")
    with c.db() as db, c.progress() as say:
        if dataset == "hospital":
            result = run_hospital_demo(db, rows or HOSPITAL_ROWS, k, say)
        else:
            result = run_demo(db, k, say)
    summary = result.summary()
    if dataset == "hospital":
        summary.update({f: result.metrics.get(f) for f in
                        ("similarity_vulnerability", "background_vulnerability")})  # fmt: skip
    print_publish(c, summary)
    if not c.json:
        if dataset == "hospital":
            out.print(
                f"similarity vulnerability {summary['similarity_vulnerability']:.3f}, "
                f"background-knowledge vulnerability {summary['background_vulnerability']:.3f}",
                markup=False,
            )
            tail = (f"--sensitive disease --sensitive-hierarchy disease=demo_hospital_disease "
                    f"--k {k} --theta {DEMO_THETA}")  # fmt: skip
            qi = HOSPITAL_QI
        else:
            tail, qi = f"--k {k}", DEMO_QI
        out.print(f"try: dbanon check {result.table} --qi {','.join(qi)} {tail}", markup=False)


@group("flags")
def flags_group() -> None:
    """Per-value consent for personalised releases (localanatomy, lag)."""


@flags_group.command("generate")
@click.argument("source")
@click.option("--key", required=True, help="The source's row key.")
@click.option("--columns", required=True, callback=qi_list, help="Semi-sensitive columns, a,b.")
@click.option("--density", type=float, required=True, help="Share of each column flagged.")
@click.option("--into", required=True, help="SCHEMA.TABLE to create (key, column_name).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.pass_obj
@fails_cleanly
def flags_generate(
    c: Ctx, source: str, key: str, columns: list[str], density: float, into: str, seed: int
) -> None:
    """Flag a seeded share of each column's values (for experiments and the demo)."""
    from dbanon.core import flags

    with c.db() as db:
        rel = catalog.relation(db.conn, source)
        col = catalog.require_columns(catalog.columns(db.conn, rel), rel, [key])[0]
        n = flags.generate(db.conn, rel, col, columns, density, into, seed)
        db.conn.commit()
    schema, name = catalog.parse_target(into)
    shown = catalog.quote_ident(name) if schema is None else catalog.qualified(schema, name)
    c.emit({"flags": n, "into": into}, lambda: click.echo(f"flagged {n} values into {shown}"))
