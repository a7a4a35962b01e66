"""The `dbanon` command: parse, call the library (dbanon.api), print. Nothing else lives here.

Exit codes: 0 done (or the model holds), 1 the checked model does not hold, 2 an error.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any

import click
import psycopg
from rich.console import Console
from rich.table import Table

from dbanon.api import Database
from dbanon.db import catalog, server
from dbanon.errors import DbanonError, first_line
from dbanon.hierarchy import HierarchyError
from dbanon.models import L_KINDS, T_GROUNDS
from dbanon.release import ALGORITHMS, ReleaseSpec

err = Console(stderr=True)
out = Console()


class Ctx:
    def __init__(self, dsn: str | None, as_json: bool) -> None:
        self.dsn = dsn
        self.json = as_json

    def db(self) -> Database:
        return Database(self.dsn)

    def emit(self, data: dict[str, Any], human: Callable[[], None]) -> None:
        if self.json:
            click.echo(json.dumps(data, default=str))
        else:
            human()

    @contextmanager
    def progress(self) -> Iterator[Callable[[str], None]]:
        """Stage messages on stderr while long work runs (silent with --json or no tty)."""
        if self.json or not err.is_terminal:
            yield lambda _msg: None
            return
        with err.status("starting") as status:
            yield lambda msg: status.update(msg)


def fails_cleanly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn user-facing errors into one line on stderr and exit code 2."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (DbanonError, HierarchyError) as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(2)
        except psycopg.Error as e:
            click.echo(f"error: PostgreSQL: {first_line(e)}", err=True)
            sys.exit(2)

    return wrapper


def qi_list(_ctx: click.Context, _param: click.Parameter, value: str | None) -> list[str]:
    return catalog.parse_list(value) if value else []


@click.group()
@click.option(
    "--dsn",
    envvar="DBANON_DSN",
    help="PostgreSQL DSN (default: $DBANON_DSN, else the embedded server).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.version_option(package_name="dbanon")
@click.pass_context
def main(ctx: click.Context, dsn: str | None, as_json: bool) -> None:
    """Publish anonymised releases of PostgreSQL tables."""
    ctx.obj = Ctx(dsn, as_json)


# --- server -------------------------------------------------------------------------------------


@main.group("server")
def server_group() -> None:
    """The embedded PostgreSQL server (used when no DSN is given)."""


@server_group.command("url")
@click.pass_obj
@fails_cleanly
def server_url(c: Ctx) -> None:
    """Print the DSN of the server in use (starting the embedded one if needed)."""
    dsn = Database(c.dsn).dsn
    c.emit({"dsn": dsn}, lambda: click.echo(dsn))


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


# --- catalog ------------------------------------------------------------------------------------


@main.command()
@click.pass_obj
@fails_cleanly
def init(c: Ctx) -> None:
    """Create or upgrade the dbanon catalog schema (Alembic migrations)."""
    with c.db() as db:
        revision = db.init()
    c.emit({"revision": revision}, lambda: click.echo(f"catalog at revision {revision}"))


@main.group()
def hierarchy() -> None:
    """Generalisation hierarchies in the catalog."""


@hierarchy.command("import")
@click.argument("name")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--replace", is_flag=True, help="Replace a hierarchy of the same name.")
@click.pass_obj
@fails_cleanly
def hierarchy_import(c: Ctx, name: str, file: str, replace: bool) -> None:
    """Import an ARX hierarchy file (value;level1;...;*) as NAME."""
    with c.db() as db:
        h = db.import_hierarchy(name, file, replace=replace)
    data = {"name": name, "leaves": len(h.leaves), "height": h.height}
    c.emit(data, lambda: click.echo(f"imported {name}: {len(h.leaves)} values, height {h.height}"))


@hierarchy.command("list")
@click.pass_obj
@fails_cleanly
def hierarchy_list(c: Ctx) -> None:
    """List the hierarchies in the catalog."""
    with c.db() as db:
        rows = db.hierarchies()

    def human() -> None:
        table = Table("name", "height", "leaves", "nodes")
        for r in rows:
            table.add_row(r["name"], str(r["height"]), str(r["leaves"]), str(r["nodes"]))
        out.print(table)

    c.emit({"hierarchies": rows}, human)


# --- audit --------------------------------------------------------------------------------------


def model_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The privacy-model options shared by `check` and `publish`."""
    options = [
        click.option("--l", "l_", type=float, help="l-diversity (needs --sensitive)."),
        click.option(
            "--l-kind",
            type=click.Choice(L_KINDS),
            default="distinct",
            show_default=True,
            help="Which l-diversity.",
        ),
        click.option("--c", "c_", type=float, help="c of recursive (c,l)-diversity."),
        click.option("--t", "t_", type=float, help="t-closeness (Earth Mover's Distance)."),
        click.option(
            "--alpha",
            type=float,
            help="(alpha,k)-anonymity: no sensitive value above this share of a class.",
        ),
        click.option(
            "--p",
            "p_",
            type=int,
            help="(p,k)-anonymity: at least p distinct sensitive values per class.",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


@main.command()
@click.argument("relation")
@click.option("--qi", required=True, callback=qi_list, help="Quasi-identifier columns, a,b,c.")
@click.option("--k", type=int, help="k-anonymity.")
@click.option("--sensitive", help="Sensitive column (for --l, --t, --alpha, --p).")
@model_options
@click.option(
    "--t-ground",
    type=click.Choice(T_GROUNDS),
    default="auto",
    show_default=True,
    help="Ground distance of --t: ordered for numeric columns when auto.",
)
@click.option("--alpha-value", help="Apply --alpha to this sensitive value only.")
@click.option(
    "--count", help="Column giving how many rows each row stands for (e.g. an Anatomy ST table)."
)
@click.pass_obj
@fails_cleanly
def check(
    c: Ctx,
    relation: str,
    qi: list[str],
    k: int | None,
    sensitive: str | None,
    l_: float | None,
    l_kind: str,
    c_: float | None,
    t_: float | None,
    alpha: float | None,
    p_: int | None,
    t_ground: str,
    alpha_value: str | None,
    count: str | None,
) -> None:
    """Audit any table or view: exit 0 if the models hold, 1 if not."""
    with c.db() as db:
        results = db.check(
            relation,
            qi,
            sensitive=sensitive,
            count=count,
            k=k,
            l=l_,
            l_kind=l_kind,
            c=c_,
            t=t_,
            alpha=alpha,
            p=p_,
            t_ground=t_ground,
            alpha_value=alpha_value,
        )
    holds = all(r.holds for r in results)
    figures: dict[str, Any] = {}
    for r in results:
        figures.update(r.figures)
    data = {
        "holds": holds,
        **figures,
        "models": [
            {"model": r.model, "holds": r.holds, **r.figures, "worst_class": r.worst_class}
            for r in results
        ],
    }

    def human() -> None:
        for r in results:
            mark = "[green]holds[/]" if r.holds else "[red]does not hold[/]"
            out.print(f"{r.model}: {mark}")
            for key, value in r.figures.items():
                out.print(f"  {key.replace('_', ' ')}: {value}")
            if r.worst_class is not None:
                out.print(f"  worst class: {r.worst_class}", markup=False)

    c.emit(data, human)
    sys.exit(0 if holds else 1)


# --- releases -----------------------------------------------------------------------------------


def print_publish(c: Ctx, summary: dict[str, Any]) -> None:
    c.emit(
        summary,
        lambda: out.print(
            f"published {summary['release']!r} as {summary['table']}: {summary['rows']} rows in "
            f"{summary['classes']} classes (smallest {summary['min_class_size']}), "
            f"GCP {summary['gcp']:.2%}, {summary['seconds']:.1f} s",
            markup=False,
        ),
    )


@main.command()
@click.argument("name")
@click.option("--source", required=True, help="SCHEMA.TABLE to anonymise.")
@click.option("--key", required=True, help="Its unique row key (never released).")
@click.option("--qi", required=True, callback=qi_list, help="Quasi-identifier columns, a,b,c.")
@click.option("--sensitive", callback=qi_list, help="Sensitive columns, released unchanged.")
@click.option("--k", type=int, help="Smallest equivalence class.")
@model_options
@click.option("--algorithm", type=click.Choice(ALGORITHMS), default="kmember", show_default=True)
@click.option(
    "--hierarchy",
    "hierarchies",
    multiple=True,
    metavar="COL=HIERARCHY",
    help="Hierarchy for a QI (repeatable); categorical QIs without one use a flat one.",
)
@click.option("--target", help="SCHEMA.TABLE of the release (default released.NAME).")
@click.option(
    "--as",
    "as_",
    type=click.Choice(["table", "view"]),
    default="table",
    show_default=True,
    help="A materialised table, or a live view (fulldomain).",
)
@click.option(
    "--max-suppression",
    type=float,
    default=0.0,
    show_default=True,
    help="Share of rows fulldomain may suppress.",
)
@click.option(
    "--seed",
    type=int,
    help="Random seed (default: a fresh secret one per run, recorded in the catalog).",
)
@click.option(
    "--seeding",
    type=click.Choice(["random", "furthest"]),
    default="random",
    show_default=True,
    help="How k-member picks each cluster's first record.",
)
@click.option(
    "--grant",
    "grants",
    multiple=True,
    metavar="ROLE",
    help="Role that may read the release (repeatable).",
)
@click.pass_obj
@fails_cleanly
def publish(
    c: Ctx,
    name: str,
    source: str,
    key: str,
    qi: list[str],
    sensitive: list[str],
    k: int | None,
    l_: float | None,
    l_kind: str,
    c_: float | None,
    t_: float | None,
    alpha: float | None,
    p_: int | None,
    algorithm: str,
    hierarchies: tuple[str, ...],
    target: str | None,
    as_: str,
    max_suppression: float,
    seed: int | None,
    seeding: str,
    grants: tuple[str, ...],
) -> None:
    """Publish (or re-publish) release NAME of a source table."""
    hmap: dict[str, str] = {}
    for item in hierarchies:
        column, eq, hname = item.rpartition("=")
        if not eq or not column or not hname:
            raise DbanonError(f"--hierarchy takes COLUMN=HIERARCHY, got {item!r}")
        hmap[column] = hname
    spec = ReleaseSpec(
        name=name,
        source=source,
        key=key,
        qi=qi,
        sensitive=sensitive,
        k=k,
        algorithm=algorithm,
        hierarchies=hmap,
        target=target,
        seed=seed,
        seeding=seeding,
        grants=list(grants),
        l=l_,
        l_kind=l_kind,
        c=c_,
        t=t_,
        alpha=alpha,
        p=p_,
        as_view=as_ == "view",
        max_suppression=max_suppression,
    )
    with c.db() as db, c.progress() as say:
        result = db.publish(spec, say)
    print_publish(c, result.summary())


@main.command()
@click.argument("name")
@click.pass_obj
@fails_cleanly
def refresh(c: Ctx, name: str) -> None:
    """Rebuild release NAME from the source as it is now (for cron or pg_cron)."""
    with c.db() as db, c.progress() as say:
        result = db.refresh(name, say)
    print_publish(c, result.summary())


@main.command()
@click.argument("name")
@click.pass_obj
@fails_cleanly
def report(c: Ctx, name: str) -> None:
    """Information loss and class figures of release NAME's latest run."""
    with c.db() as db:
        data = db.report(name)

    def human() -> None:
        table = Table(title=f"release {name} ({data['table']})", show_header=False)
        rows = [
            ("algorithm", data["algorithm"]),
            ("promises", "; ".join(data["models"])),
            ("rows", str(data["rows"])),
            ("Total-IL", f"{data['total_il']:.1f}"),
            ("NCP (GCP)", f"{data['gcp']:.2%}"),
            ("discernibility", str(data["discernibility"])),
            ("classes", str(data["classes"])),
            ("average class size", f"{data['avg_class_size']:.2f}"),
            ("min / max class size", f"{data['min_class_size']} / {data['max_class_size']}"),
            ("run time", f"{data['seconds']:.2f} s"),
            ("source rows", str(data["source_rows"])),
            ("published at", data["published_at"]),
        ]
        for label, value in rows:
            table.add_row(label, value)
        out.print(table)

    c.emit(data, human)


# --- demo and benchmarks ------------------------------------------------------------------------


@main.command()
@click.option("--k", type=int, default=10, show_default=True)
@click.pass_obj
@fails_cleanly
def demo(c: Ctx, k: int) -> None:
    """Load UCI Adult into demo.adult and publish a k-member release of it."""
    from dbanon.demo import run_demo

    with c.db() as db, c.progress() as say:
        result = run_demo(db, k, say)
    print_publish(c, result.summary())
    if not c.json:
        out.print(
            f"try: dbanon check {result.table} --qi age,education_num,workclass,"
            f"marital_status,race,sex,native_country --k {k}",
            markup=False,
        )


@main.group()
def bench() -> None:
    """Benchmarks of the algorithms on UCI Adult (in memory)."""


@bench.command("kmember")
@click.option("--rows", type=click.IntRange(2, 45222), default=30162, show_default=True)
@click.option("--k", type=click.IntRange(2), default=10, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.pass_obj
@fails_cleanly
def bench_kmember(c: Ctx, rows: int, k: int, seed: int) -> None:
    """Greedy k-member on Adult (8 QIs, ARX hierarchies): seconds and GCP."""
    from dbanon.bench import bench_kmember as run

    data = run(rows, k, seed)
    c.emit(
        data,
        lambda: click.echo(
            f"kmember: {data['rows']} rows, k={data['k']}: {data['seconds']:.2f} s, "
            f"GCP {data['gcp']:.2%}"
        ),
    )


@bench.command("mondrian")
@click.option("--rows", type=click.IntRange(2, 45222), default=30162, show_default=True)
@click.option("--k", type=click.IntRange(2), default=10, show_default=True)
@click.option(
    "--hierarchies/--ordered",
    default=False,
    show_default=True,
    help="ARX hierarchies, or categories as ordered codes (the reference's setting).",
)
@click.pass_obj
@fails_cleanly
def bench_mondrian(c: Ctx, rows: int, k: int, hierarchies: bool) -> None:
    """Strict Mondrian on Adult (8 QIs): seconds (best of 20) and GCP."""
    from dbanon.bench import bench_mondrian as run

    data = run(rows, k, ordered=not hierarchies)
    c.emit(
        data,
        lambda: click.echo(
            f"mondrian ({data['setting']}): {data['rows']} rows, k={data['k']}: "
            f"{data['seconds'] * 1000:.1f} ms, GCP {data['gcp']:.2%}"
        ),
    )


@bench.command("fulldomain")
@click.option("--rows", type=click.IntRange(2, 45222), default=30162, show_default=True)
@click.option("--k", type=click.IntRange(2), default=5, show_default=True)
@click.pass_obj
@fails_cleanly
def bench_fulldomain(c: Ctx, rows: int, k: int) -> None:
    """Full-domain lattice search in PostgreSQL on Adult (9 QIs, ARX hierarchies, 12,960 nodes)."""
    from dbanon.demo import prepare
    from dbanon.setlogic.fulldomain import bench as run

    with c.db() as db:
        prepare(db)
        data = run(db.conn, rows, k)
        db.conn.rollback()
    c.emit(
        data,
        lambda: click.echo(
            f"fulldomain: {data['rows']} rows, k={data['k']}: {data['seconds']:.3f} s, "
            f"{data['nodes_checked']} of {data['nodes']} nodes checked, loss {data['loss']:.2%}, "
            f"levels {data['levels']}"
        ),
    )


@bench.command("check")
@click.option("--rows", type=click.IntRange(1), default=1_000_000, show_default=True)
@click.option("--k", type=click.IntRange(1), default=5, show_default=True)
@click.pass_obj
@fails_cleanly
def bench_check(c: Ctx, rows: int, k: int) -> None:
    """`check` on a generated table (6 QIs; kept in schema dbanon_bench)."""
    from dbanon.bench import bench_check as run

    with c.db() as db:
        data = run(db.conn, rows, k)
        db.conn.rollback()
    c.emit(
        data,
        lambda: click.echo(
            f"check: {data['rows']} rows, 6 QIs: k-anonymity {data['seconds_k']:.2f} s, "
            f"distinct l-diversity {data['seconds_l']:.2f} s"
        ),
    )


@main.group()
def experiment() -> None:
    """Reproductions of the papers' experiments (CSV and PNG)."""


@experiment.command("kmember")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False),
    default="results/kmember",
    show_default=True,
)
@click.option("--rows", type=click.IntRange(100, 45222), default=45222, show_default=True)
@click.pass_obj
@fails_cleanly
def experiment_kmember(c: Ctx, out_dir: str, rows: int) -> None:
    """Greedy k-member vs median partitioning on Adult, k = 2..100 (the paper's figs 3, 4)."""
    from dbanon.experiments.kmember import run

    with c.progress() as say:
        data = run(out_dir, rows=rows, progress=say)

    def human() -> None:
        table = Table("algorithm", "k", "Total-IL", "NCP", "classes", "seconds")
        for r in data["results"]:
            table.add_row(
                r["algorithm"],
                str(r["k"]),
                f"{r['total_il']:.0f}",
                f"{r['ncp']:.2%}",
                str(r["classes"]),
                f"{r['seconds']:.3f}",
            )
        out.print(table)
        out.print(
            f"k-member loss lower for every k: {data['kmember_loss_lower_for_every_k']}; "
            f"k-member slower for every k: {data['kmember_slower_for_every_k']}"
        )
        out.print(f"wrote {data['csv']}, {', '.join(data['plots'])}", markup=False)

    c.emit(data, human)
