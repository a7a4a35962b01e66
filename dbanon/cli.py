"""The `dbanon` command: parse, call the library (dbanon.api), print. Nothing else lives here.

Exit codes: 0 done (or the model holds), 1 the checked model does not hold, 2 an error, 3 busy
(another run holds the release), 4 refused, 130 interrupted by SIGINT, 143 by SIGTERM.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from functools import wraps
from typing import Any

import click
import psycopg

from dbanon import methods, runners
from dbanon.api import Database
from dbanon.db import catalog, server
from dbanon.errors import DbanonError, first_line
from dbanon.hierarchy import HierarchyError
from dbanon.methods import Option
from dbanon.models import L_KINDS, T_GROUNDS
from dbanon.release import ReleaseSpec


class _Console:
    """rich's Console, made on first use: start-up imports only what a command needs (a
    command that prints no table or spinner never imports rich). Not on a terminal (a pipe, a
    file), nothing is wrapped and tables print as tab-separated lines: a script or a paste gets
    whole lines, never cells cut to fit 80 columns."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
            if not self._console.is_terminal:
                self._console.soft_wrap = True
        return getattr(self._console, name)

    def print(self, obj: Any, *args: Any, **kwargs: Any) -> None:  # noqa: A003
        if isinstance(obj, PlainTable):
            click.echo(obj.text(), err=self._options.get("stderr", False))
        else:
            self.__getattr__("print")(obj, *args, **kwargs)


class PlainTable:
    """A table for a pipe: a header line (unless none) and one tab-separated line per row."""

    def __init__(self, *columns: str, show_header: bool = True, **_ignored: Any) -> None:
        self.header = list(columns) if show_header and columns else None
        self.rows: list[tuple[str, ...]] = []

    def add_row(self, *cells: Any) -> None:
        self.rows.append(tuple(" ".join(str(c).split()) for c in cells))

    def text(self) -> str:
        lines = ([self.header] if self.header else []) + self.rows
        return "\n".join("\t".join(line) for line in lines)


def Table(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 - stands in for rich's class
    if not out.is_terminal:
        return PlainTable(*args, **kwargs)
    from rich.table import Table as RichTable

    return RichTable(*args, **kwargs)


err = _Console(stderr=True)
out = _Console()


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


def _error(message: str, code: int, prefix: str = "error: ") -> None:
    """An error: one line on stderr, or with --json one JSON object on stdout; then exit."""
    ctx = click.get_current_context(silent=True)
    c = ctx.find_object(Ctx) if ctx else None
    if c is not None and c.json:
        click.echo(json.dumps({"error": message, "exit": code}))
    else:
        click.echo(f"{prefix}{message}", err=True)
    sys.exit(code)


def fails_cleanly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn user-facing errors into one line (or one JSON object) and exit code 2."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (DbanonError, HierarchyError) as e:
            _error(str(e), getattr(e, "exit_code", 2))
        except psycopg.Error as e:
            _error(f"PostgreSQL: {first_line(e)}", 2)

    return wrapper


def _json_anywhere(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        c = ctx.find_object(Ctx)
        if c is not None:
            c.json = True


class Command(click.Command):
    """Every command takes --json after its name too (`dbanon check --json ...`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.append(
            click.Option(
                ["--json"], is_flag=True, expose_value=False, is_eager=True,
                callback=_json_anywhere, help="Print one JSON object.",
            )
        )  # fmt: skip


class Group(click.Group):
    """Subcommands are `Command`s; with --json anywhere, usage errors are JSON too."""

    command_class = Command

    def invoke(self, ctx: click.Context) -> Any:  # noqa: D102
        if ctx.parent is not None:
            return super().invoke(ctx)
        return interruptible(lambda: super(Group, self).invoke(ctx))

    def main(self, args: Any = None, **extra: Any) -> Any:  # noqa: D102
        argv = list(sys.argv[1:] if args is None else args)
        if "--json" not in argv:
            return super().main(argv, **extra)
        extra.pop("standalone_mode", None)
        try:
            return super().main(argv, standalone_mode=False, **extra)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except click.ClickException as e:
            click.echo(json.dumps({"error": e.format_message(), "exit": e.exit_code}))
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo(json.dumps({"error": "aborted", "exit": 1}))
            sys.exit(1)


Group.group_class = Group


def interruptible(run: Callable[[], Any]) -> Any:
    """Run a command under dbanon's SIGINT/SIGTERM handlers (dbanon.interrupts): after a
    signal, whatever the command ended with, print one line and exit 130 (SIGINT) or 143."""
    from dbanon import interrupts

    interrupts.reset()
    with interrupts.handled():
        try:
            result = run()
        except BaseException:
            if interrupts.message() is None:
                raise
            result = None
        said = interrupts.message()
        if said is not None:
            text, code = said
            _error(text, code, prefix="")
    return result


class Seconds(click.FloatRange):
    """Seconds, at least 0 and finite: nan passes every comparison, and inf never ends a wait."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return rv


def qi_list(_ctx: click.Context, _param: click.Parameter, value: str | None) -> list[str]:
    return catalog.parse_list(value) if value else []


def pairs(items: tuple[str, ...], flag: str) -> dict[str, str]:
    """COLUMN=HIERARCHY options into a mapping (split at the last '=')."""
    out: dict[str, str] = {}
    for item in items:
        column, eq, name = item.rpartition("=")
        if not eq or not column or not name:
            raise DbanonError(f"{flag} takes COLUMN=HIERARCHY, got {item!r}")
        out[column] = name
    return out


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


# --- server -------------------------------------------------------------------------------------


@main.group("server")
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
        click.echo(f"imported {name}: {len(h.leaves)} values, height {h.height}"
                   + ("" if stored["changed"] else " (unchanged)"))  # fmt: skip
        if stored["changed"] and stored["releases"]:
            click.echo(f"{', '.join(stored['releases'])} take it at their next refresh")

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
            click.echo(f"# used by: {', '.join(data['used_by'])}", err=True)
        click.echo(f"# version: {data['version']}", err=True)
        for release, version in data["pinned_by"].items():
            if version != data["version"]:
                click.echo(f"# {release} uses version {version} until its next refresh", err=True)

    c.emit(data, human)


@hierarchy.command("drop")
@click.argument("name")
@click.pass_obj
@fails_cleanly
def hierarchy_drop(c: Ctx, name: str) -> None:
    """Remove hierarchy NAME from the catalog (refused while a release uses it)."""
    with c.db() as db:
        db.drop_hierarchy(name)
    c.emit({"dropped": name}, lambda: click.echo(f"dropped hierarchy {name}"))


# --- audit --------------------------------------------------------------------------------------


def model_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The privacy-model options shared by `check` and `publish`."""
    options = [
        click.option("--l", "l_", type=float, help="l-diversity (needs --sensitive)."),
        click.option(
            "--l-kind",
            type=click.Choice(L_KINDS),
            help="Which l-diversity (default: distinct; publish: the one the method promises).",
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
        click.option(
            "--t-ground",
            type=click.Choice(T_GROUNDS),
            default="auto",
            show_default=True,
            help="Ground distance of --t: ordered for numeric columns when auto.",
        ),
        click.option("--alpha-value", help="Apply --alpha to this sensitive value only."),
        click.option(
            "--theta",
            type=int,
            help="(θ,k)-anonymity: θ categories of the sensitive column per class (needs --k).",
        ),
        click.option(
            "--sensitive-hierarchy",
            "sensitive_hierarchies",
            multiple=True,
            metavar="COL=HIERARCHY",
            help="Stored hierarchy whose --category-level gives the sensitive column's categories.",
        ),
        click.option(
            "--category-level",
            type=int,
            help="Level of --sensitive-hierarchy that holds the categories (default: just below "
            "the root).",
        ),
        click.option(
            "--category-width",
            type=float,
            help="Numeric sensitive column: categories are intervals [i*W, (i+1)*W).",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def risk_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`check --risk` and its options (dbanon.metrics.risk)."""
    options = [
        click.option("--risk", is_flag=True, default=None,
                     help="Measure re-identification risk over --qi (prosecutor; with "
                     "--population also journalist and marketer; population uniqueness)."),
        click.option("--risk-threshold", "threshold", type=float,
                     help="Records whose risk is above this are 'at risk' (default 0.2)."),
        click.option("--population", metavar="SCHEMA.TABLE",
                     help="Population the relation is a sample of (same QI columns)."),
        click.option("--population-size", type=float,
                     help="Population size, for the uniqueness estimate without --population."),
    ]  # fmt: skip
    for option in reversed(options):
        fn = option(fn)
    return fn


def risk_asked(is_release: bool, qi: list[str], args: dict[str, Any]) -> bool:
    """--risk, or any of its options (which imply it); never with --release."""
    asked = any(v is not None and v is not False for v in args.values())
    args.pop("risk", None)
    if asked and is_release:
        raise DbanonError("--risk checks a relation with --qi; `dbanon report` shows a release's")
    if asked and not qi:
        raise DbanonError("--risk needs --qi")
    return asked


def risk_lines(risk: dict[str, Any] | None) -> list[tuple[str, str]]:
    from dbanon.metrics.risk import lines

    return lines(risk) if risk else []


@main.command()
@click.argument("relation")
@click.option("--qi", callback=qi_list, help="Quasi-identifier columns, a,b,c (required).")
@click.option(
    "--release", "is_release", is_flag=True,
    help="RELATION is a release's name: run the checks its publish ran (every promise, e.g. "
    "local anatomy's per-attribute buckets) on its relations as they are now.",
)  # fmt: skip
@click.option("--k", type=int, help="k-anonymity.")
@click.option("--sensitive", help="Sensitive column (for --l, --t, --alpha, --p, --theta).")
@model_options
@click.option(
    "--count", help="Column giving how many rows each row stands for (e.g. an Anatomy ST table)."
)
@click.option(
    "--buckets",
    help="ST table (bucket_id, sensitive, count) of a cross-bucket release whose QIT is RELATION "
    "(--l-kind cross-bucket).",
)
@risk_options
@click.pass_obj
@fails_cleanly
def check(
    c: Ctx,
    relation: str,
    qi: list[str],
    is_release: bool,
    k: int | None,
    sensitive: str | None,
    l_: float | None,
    l_kind: str | None,
    c_: float | None,
    t_: float | None,
    alpha: float | None,
    p_: int | None,
    t_ground: str,
    alpha_value: str | None,
    theta: int | None,
    sensitive_hierarchies: tuple[str, ...],
    category_level: int | None,
    category_width: float | None,
    count: str | None,
    buckets: str | None,
    **risk_args: Any,
) -> None:
    """Audit any table or view: exit 0 if the models hold, 1 if not (--risk: also measure
    its re-identification risk, a figure and no verdict)."""
    risk = risk_asked(is_release, qi, risk_args)
    results = []
    if is_release:
        from dbanon.release import recheck

        with c.db() as db:
            results = recheck(db.conn, relation)
    elif not qi:
        raise DbanonError("check needs --qi (or --release and a release's name)")
    elif risk and all(x is None for x in (k, l_, t_, alpha, p_, theta)):
        pass  # --risk alone: no model to check
    else:
        with c.db() as db:
            results = db.check(
                relation, qi, sensitive=sensitive, count=count, buckets=buckets,
                sensitive_hierarchies=pairs(sensitive_hierarchies, "--sensitive-hierarchy"),
                theta=theta, category_level=category_level, category_width=category_width, k=k,
                l=l_, l_kind=l_kind or "distinct", c=c_, t=t_, alpha=alpha, p=p_,
                t_ground=t_ground, alpha_value=alpha_value,
            )  # fmt: skip
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
    if risk:
        with c.db() as db:
            data["risk"] = db.risk(relation, qi, count=count, **risk_args)

    def human() -> None:
        for r in results:
            mark = "[green]holds[/]" if r.holds else "[red]does not hold[/]"
            out.print(f"{r.model}: {mark}")
            for key, value in r.figures.items():
                out.print(f"  {key.replace('_', ' ')}: {value}")
            if r.worst_class is not None:
                out.print(f"  worst class: {r.worst_class}", markup=False)
        for label, text in risk_lines(data.get("risk")):
            out.print(f"{label}: {text}", markup=False)

    c.emit(data, human)
    sys.exit(0 if holds else 1)


# --- releases -----------------------------------------------------------------------------------


def print_publish(c: Ctx, summary: dict[str, Any]) -> None:
    def human() -> None:
        gcp = "" if summary["gcp"] is None else f", GCP {summary['gcp']:.2%}"
        classes = (
            "" if summary["classes"] is None
            else f" in {summary['classes']} classes (smallest {summary['min_class_size']})"
        )  # fmt: skip
        out.print(
            f"published {summary['release']!r} as {', '.join(summary['objects'])}: "
            f"{summary['rows']} rows{classes}{gcp}, {summary['seconds']:.1f} s",
            markup=False,
        )
        changes = summary.get("grants") or {}
        for what in ("added", "revoked"):
            if changes.get(what):
                out.print(f"grants {what}: {', '.join(changes[what])}", markup=False)
        if changes.get("kept"):
            out.print(f"grants kept: {', '.join(changes['kept'])}", markup=False)
        for warning in summary.get("warnings") or []:
            out.print(f"warning: {warning}", markup=False)

    c.emit(summary, human)


def method_params() -> list[click.Option]:
    """--algorithm, and one flag per option any registered method declares (help says which
    methods take it); publish refuses a flag the chosen method does not take."""
    seen: dict[str, tuple[Option, list[str]]] = {}
    defaults: dict[str, dict[str, Any]] = {}
    helps: dict[str, dict[str, str]] = {}
    for m in methods.methods().values():
        for o in m.all_options():
            seen.setdefault(o.name, (o, []))[1].append(m.name)
            defaults.setdefault(o.name, {})[m.name] = o.default
            helps.setdefault(o.name, {}).setdefault(o.help, m.name)
    params = [
        click.Option(
            ["--algorithm"], type=click.Choice(list(methods.methods())), default=methods.DEFAULT,
            show_default=True, help="The publishing method (`dbanon methods` lists them).",
        )
    ]  # fmt: skip
    for o, owners in seen.values():
        kind: Any = click.Choice(o.choices) if o.choices else o.type
        default = "" if o.default is None else f"; default {o.default}"
        if len(set(map(repr, defaults[o.name].values()))) > 1:  # say whose default is which
            default = "; default " + ", ".join(f"{m} {d}" for m, d in defaults[o.name].items())
        # A bool option is a flag (None when absent, so other methods' runs never see it).
        flag: dict[str, Any] = {"is_flag": True} if o.type is bool else {"type": kind}
        params.append(click.Option(
            [o.flag, "method_" + o.name], default=None,
            help=(o.help if len(helps[o.name]) == 1
                  else " ".join(f"{m}: {h}" for h, m in helps[o.name].items()))
            + f" [{', '.join(owners)}{default}]", **flag,
        ))  # fmt: skip
    return params


class MethodCommand(Command):
    """A command whose flags include every method's (`method_params`). They are made when the
    command is first parsed or shown: loading the methods imports numpy and the algorithms,
    which other commands (`dbanon check` above all) must start without."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._methods_loaded = False

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        if not self._methods_loaded:
            self._methods_loaded = True
            at = next(i for i, p in enumerate(self.params) if p.name == "hierarchies")
            self.params[at:at] = method_params()
        return super().get_params(ctx)


@main.command(cls=MethodCommand, epilog=None)
@click.argument("name")
@click.option("--source", required=True, help="SCHEMA.TABLE to anonymise.")
@click.option("--key", required=True, help="Its unique row key (never released).")
@click.option(
    "--qi",
    "--columns",
    "qi",
    required=True,
    callback=qi_list,
    help="Quasi-identifier columns, a,b,c (--columns: the columns a noise method perturbs).",
)
@click.option("--sensitive", callback=qi_list, help="Sensitive columns, released unchanged.")
@click.option(
    "--keep", callback=qi_list,
    help="Other columns released as they are, a,b,c (nothing else is ever released); refused "
    "when one singles out rows.",
)
@click.option(
    "--allow-identifying", "allow_identifying", multiple=True, metavar="COL",
    help="A --keep column released even if it singles out rows (repeatable, or a,b).",
)
@click.option(
    "--max-unique-share", type=click.FloatRange(0, 1), default=None,
    help="Largest share of rows a --keep column may be unique for [default 0.5].",
)
@click.option("--k", type=int, help="Smallest equivalence class.")
@model_options
@click.option(
    "--hierarchy",
    "hierarchies",
    multiple=True,
    metavar="COL=HIERARCHY",
    help="Hierarchy for a QI (repeatable); categorical QIs without one use a flat one.",
)
@click.option("--target", help="SCHEMA.TABLE of the release (default released.NAME).")
@click.option(
    "--grant",
    "grants",
    multiple=True,
    metavar="ROLE",
    help="Role that may read the release (repeatable; kept on --replace).",
)
@click.option(
    "--revoke", multiple=True, metavar="ROLE", help="Role that no longer may (repeatable)."
)
@click.option(
    "--grant-live",
    is_flag=True,
    help="Let --grant give a new role a live view, whose plans and statistics show the rows "
    "it hides (docs/live-views.md).",
)
@click.option("--replace", is_flag=True, help="Redefine a release that exists.")
@click.option(
    "--allow-composition",
    is_flag=True,
    help="With --replace: publish even if intersecting it with earlier releases breaks "
    "the promise.",
)
@click.option(
    "--wait",
    type=Seconds(0),
    default=0,
    help="Seconds to wait for another run of the release (else exit 3 at once).",
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
    keep: list[str],
    allow_identifying: tuple[str, ...],
    max_unique_share: float | None,
    k: int | None,
    l_: float | None,
    l_kind: str | None,
    c_: float | None,
    t_: float | None,
    alpha: float | None,
    p_: int | None,
    t_ground: str,
    alpha_value: str | None,
    theta: int | None,
    sensitive_hierarchies: tuple[str, ...],
    category_level: int | None,
    category_width: float | None,
    algorithm: str,
    hierarchies: tuple[str, ...],
    target: str | None,
    grants: tuple[str, ...],
    revoke: tuple[str, ...],
    grant_live: bool,
    replace: bool,
    allow_composition: bool,
    wait: float,
    **method_opts: Any,
) -> None:
    """Publish release NAME of a source table (see `dbanon methods`)."""
    hmap = pairs(hierarchies, "--hierarchy")
    options = {n[len("method_") :]: v for n, v in method_opts.items() if v is not None}
    spec = ReleaseSpec.from_options(
        name, source, key, qi, sensitive=sensitive, method=algorithm, k=k, l=l_, l_kind=l_kind,
        c=c_, t=t_, t_ground=t_ground, alpha=alpha, alpha_value=alpha_value, p=p_, theta=theta,
        sensitive_hierarchies=pairs(sensitive_hierarchies, "--sensitive-hierarchy"),
        category_level=category_level, category_width=category_width, options=options,
        hierarchies=hmap, target=target, grants=grants, keep=keep,
        allow_identifying=[n for a in allow_identifying for n in catalog.parse_list(a)],
        max_unique_share=max_unique_share,
    )  # fmt: skip
    with c.db() as db, c.progress() as say:
        result = db.publish(
            spec, say, replace=replace, revoke=revoke, wait=wait,
            allow_composition=allow_composition, grant_live=grant_live,
        )  # fmt: skip
    print_publish(c, result.summary())


@main.command()
@click.argument("name", required=False)
@click.option("--due", is_flag=True, help="Refresh every scheduled release that is due.")
@click.option("--force", is_flag=True, help="With --due: rebuild even an unchanged source.")
@click.option(
    "--now",
    callback=lambda _c, _p, v: _timestamp(v),
    help="With --due: evaluate the schedules at this ISO time (UTC unless it has an offset).",
)
@click.option(
    "--wait",
    type=Seconds(0),
    default=0,
    help="Seconds to wait for another run of the release (else exit 3 at once).",
)
@click.option("--regroup", is_flag=True, help="Start the groups over for this run.")
@click.option(
    "--allow-composition",
    is_flag=True,
    help="Publish even if intersecting it with earlier releases breaks the promise.",
)
@click.pass_obj
@fails_cleanly
def refresh(
    c: Ctx,
    name: str | None,
    due: bool,
    force: bool,
    now: datetime | None,
    wait: float,
    regroup: bool,
    allow_composition: bool,
) -> None:
    """Rebuild release NAME from the source as it is now, or (--due) every release whose
    schedule says so: for cron, a systemd timer or pg_cron."""
    if due == bool(name):
        raise DbanonError("give a release NAME, or --due (not both)")
    if not due and (force or now):
        raise DbanonError("--force and --now go with --due")
    if due:
        when = now.replace(tzinfo=now.tzinfo or timezone.utc) if now else None
        with c.db() as db, c.progress() as say:
            results = db.refresh_due(now=when, force=force, progress=say)

        from dbanon.schedule import exit_code

        def human() -> None:
            for r in results:
                extra = r.get("error") or r.get("next_due_at") or ""
                if r["outcome"] == "refreshed":
                    extra = f"{_figure(r['rows'])} rows"
                click.echo(f"{r['release']}: {r['outcome']}{' - ' + extra if extra else ''}")

        code = exit_code(results)
        c.emit({"results": results, "exit": code}, human)
        sys.exit(code)
    with c.db() as db, c.progress() as say:
        result = db.refresh(
            name,  # type: ignore[arg-type]
            say,
            wait=wait,
            regroup=regroup,
            allow_composition=allow_composition,
        )
    print_publish(c, result.summary())


def _timestamp(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not an ISO time such as 2026-11-22T03:00") from None


class DefaultGroup(Group):
    """`dbanon schedule NAME --every ...` is `dbanon schedule set NAME --every ...`."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["set", *args]
        return super().resolve_command(ctx, args)


@main.group("schedule", cls=DefaultGroup)
def schedule_group() -> None:
    """When `dbanon refresh --due` refreshes each release."""


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
@click.option("--write", type=click.Path(file_okay=False), help="Write the units into DIR.")
@click.pass_obj
@fails_cleanly
def schedule_install(c: Ctx, kind: str | None, write: str | None) -> None:
    """Print (or write) what runs `dbanon refresh --due` every few minutes, against the server
    this command reaches; a password goes into a passfile of mode 0600, never into the job."""
    from dbanon import schedule as sched

    data = sched.install(kind or "", c.dsn, write)

    def human() -> None:
        if "cron" in data:
            click.echo(data["cron"], nl=False)
        elif "written" in data:
            click.echo("\n".join(data["written"]))
        else:
            for name, text in data["units"].items():
                click.echo(f"# {name}\n{text}")
        click.echo(f"# the job reaches the server chosen by {data['server']}", err=True)
        for path in data["secrets"]:
            click.echo(f"# wrote the password into {path} (mode 0600)", err=True)

    c.emit(data, human)


def _figure(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)
    return "-" if value is None else str(value)


@main.command()
@click.argument("name")
@click.option("--queries", "n", type=click.IntRange(1), default=1000, show_default=True,
              help="Random SUM queries in the workload.")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the workload.")
@click.pass_obj
@fails_cleanly
def evaluate(c: Ctx, name: str, n: int, seed: int) -> None:
    """Query error of release NAME (a seeded SUM workload, bounds against the source's exact
    answers), with its DM and the exposure its run recorded."""
    from dbanon.metrics.evaluate import evaluate as run

    with c.db() as db:
        data = run(db.conn, name, n, seed)

    def human() -> None:
        def shown(v: Any) -> str:
            return "-" if v is None else f"{v:.4g}"

        click.echo(
            f"{name}: query error {data['query_error']:.4f} (median "
            f"{data['query_error_median']:.4f}, {data['queries']} queries, seed {seed}), "
            f"DM {data['dm']:,}, exposure {shown(data['exposure'])} "
            f"(max {shown(data['exposure_max'])})"
        )

    c.emit(data, human)


def _sizes(sizes: dict[str, Any] | None, what: str) -> str:
    """A count with its size statistics, saying what it counts."""
    if sizes is None:
        return "-"
    avg = sizes["avg_size"]
    spread = ", ".join(
        f"{label} {value}" for label, value in (
            ("smallest", _figure(sizes["min_size"])), ("largest", _figure(sizes["max_size"])),
            ("average", "-" if avg is None else f"{avg:,.1f}"),
        ) if value != "-"
    )  # fmt: skip
    return f"{_figure(sizes['count'])} ({what}{'; ' + spread if spread else ''})"


@main.command()
@click.argument("name")
@click.pass_obj
@fails_cleanly
def report(c: Ctx, name: str) -> None:
    """Information loss and class figures of the run whose release is in place: its released
    classes (rows with equal released QIs) and the method's own groups, apart."""
    with c.db() as db:
        data = db.report(name)

    def human() -> None:
        table = Table(title=f"release {name}", show_header=False)
        gcp = data["gcp"]
        rows = [
            ("method", data["method"]),
            ("promises", "; ".join(data["models"]) or "no class model (checks of its own)"),
            ("objects", ", ".join(data["objects"])),
            ("rows", _figure(data["rows"])),
            ("released classes", _sizes(data["released_classes"], "rows with equal released QIs")),
            ("NCP (GCP)", "-" if gcp is None else f"{gcp:.2%}"),
            ("run time", "-" if data["seconds"] is None else f"{data['seconds']:.2f} s"),
            ("source rows", _figure(data["source_rows"])),
            ("published at", _figure(data["published_at"])),
        ]
        groups = data["internal_groups"]
        if groups:  # a method that forms groups of its own
            rows.insert(5, ("internal groups", _sizes(groups, "the method's own groups")))
        rows += risk_lines(data.get("risk"))
        rows += [(k.replace("_", " "), _figure(v)) for k, v in data["method_metrics"].items()]
        for label, value in rows:
            table.add_row(label, value)
        out.print(table)
        if data["last_failure"]:  # a newer run did not replace the release in place
            out.print(f"warning: {data['last_failure']['message']}", markup=False)
        for w in data["warnings"]:
            out.print(f"warning: {w}", markup=False)

    c.emit(data, human)


@main.command()
@click.argument("source")
@click.argument("release")
@click.option("--columns", required=True, callback=qi_list, help="Columns to cluster on, a,b.")
@click.option("--clusters", type=click.IntRange(2), required=True, help="Number of clusters.")
@click.option(
    "--algorithm",
    type=click.Choice(["kmeans", "chameleon", "agglomerative"]),
    default="kmeans",
    show_default=True,
    help="k-means, Chameleon, or Ward agglomerative on a 10-nearest-neighbour graph.",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.pass_obj
@fails_cleanly
def compare(
    c: Ctx, source: str, release: str, columns: list[str], clusters: int, algorithm: str, seed: int
) -> None:
    """Misclassification of clustering perturbed RELEASE vs SOURCE (rows paired through the
    catalog's private map, clusters matched by the Hungarian method)."""
    with c.db() as db:
        data = db.compare(source, release, columns, clusters, algorithm, seed)
    c.emit(
        data,
        lambda: click.echo(
            f"{algorithm}, {clusters} clusters on {', '.join(columns)}: "
            f"misclassification {data['misclassification']:.2%} of {data['rows']} rows; SEC "
            + ", ".join(f"{k} {v:.2%}" for k, v in data["sec"].items())
            + f"; linkage {data['linkage']['measured']:.2%} of {data['linkage']['sample']} rows"
            + ("" if data["linkage"]["recorded"] is None
               else f" (recorded at publish {data['linkage']['recorded']:.2%})")
        ),
    )


@main.command("methods")
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


@main.command("docs")
@click.option("--check", is_flag=True, help="Exit 1 naming the files whose blocks are stale.")
@click.pass_obj
def docs_command(c: Ctx, check: bool) -> None:
    """Regenerate the generated blocks of README.md and docs/ (tables, figures, CLI reference)."""
    from dbanon import docgen

    files = docgen.stale() if check else docgen.write()
    key = "stale" if check else "changed"
    c.emit({key: files}, lambda: click.echo("\n".join(files) or "up to date"))
    if check and files:
        raise SystemExit(1)


@main.command("releases")
@click.pass_obj
@fails_cleanly
def releases_command(c: Ctx) -> None:
    """Every release: method, promises, objects, latest run."""
    with c.db() as db:
        rows = db.releases()

    def human() -> None:
        table = Table("name", "method", "promises", "objects", "last run", "at", "rows")
        for r in rows:
            missing = " (missing: " + ", ".join(r["missing"]) + ")" if r["missing"] else ""
            table.add_row(
                r["name"], r["method"], "; ".join(r["models"]),
                ", ".join(r["objects"]) + missing, r["last_status"] or "-",
                r["last_run_at"] or "-", _figure(r["rows"]),
            )  # fmt: skip
        out.print(table)
        for r in rows:  # a run newer than the release in place did not replace it
            if r["last_failure"]:
                out.print(f"{r['name']}: {r['last_failure']['message']}", markup=False)

    c.emit({"releases": rows}, human)


@main.command("drop")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask.")
@click.option("--wait", type=Seconds(0), default=0, help="Seconds to wait for a run of NAME.")
@click.pass_obj
@fails_cleanly
def drop_command(c: Ctx, name: str, yes: bool, wait: float) -> None:
    """Drop release NAME: its released relations and its catalog entry (runs included)."""
    if not yes:
        if c.json or not sys.stdin.isatty():
            raise DbanonError(f"dropping release {name!r} needs --yes when nobody can be asked")
        click.confirm(f"drop release {name!r} and its released relations?", abort=True)
    with c.db() as db:
        dropped = db.drop(name, wait)
    c.emit(
        {"release": name, "dropped": dropped},
        lambda: click.echo(f"dropped release {name!r}: {', '.join(dropped) or 'no relations'}"),
    )


@main.command("uninstall")
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
            click.echo(f"dropped release {name!r}: {', '.join(rels) or 'no relations'}")
        click.echo("dropped the dbanon catalog (schema dbanon)")
        if data["schemas_left"]:
            click.echo(f"left the target schemas: {', '.join(data['schemas_left'])}")

    c.emit(data, human)


# --- grants and the stored spec (dbanon.grants) ------------------------------------------------


@main.command("grant")
@click.argument("name")
@click.argument("roles", nargs=-1, required=True)
@click.option("--wait", type=Seconds(0), default=0, help="Seconds to wait for a run of NAME.")
@click.option(
    "--grant-live",
    is_flag=True,
    help="Grant a live view, whose plans and statistics show the rows it hides.",
)
@click.pass_obj
@fails_cleanly
def grant_command(
    c: Ctx, name: str, roles: tuple[str, ...], wait: float, grant_live: bool
) -> None:
    """Let ROLES read release NAME now and after every refresh (no rebuild)."""
    with c.db() as db:
        data = db.grant(name, roles, wait=wait, grant_live=grant_live)
    c.emit(data, lambda: click.echo(
        f"release {name!r} granted to {', '.join(data['grants']) or 'nobody'}"))  # fmt: skip


@main.command("revoke")
@click.argument("name")
@click.argument("roles", nargs=-1, required=True)
@click.option("--wait", type=Seconds(0), default=0, help="Seconds to wait for a run of NAME.")
@click.pass_obj
@fails_cleanly
def revoke_command(c: Ctx, name: str, roles: tuple[str, ...], wait: float) -> None:
    """Stop ROLES reading release NAME, now and after every refresh (no rebuild)."""
    with c.db() as db:
        data = db.revoke(name, roles, wait=wait)
    c.emit(data, lambda: click.echo(
        f"release {name!r} granted to {', '.join(data['grants']) or 'nobody'}"))  # fmt: skip


@main.command("show")
@click.argument("name")
@click.pass_obj
@fails_cleanly
def show_command(c: Ctx, name: str) -> None:
    """Release NAME's stored spec: the `publish` command that makes it, then its JSON."""
    with c.db() as db:
        data = db.show(name)

    def human() -> None:
        click.echo(data["command"])
        click.echo(json.dumps(data["spec"], indent=2, ensure_ascii=False))

    c.emit(data, human)


@main.command("export")
@click.argument("names", nargs=-1)
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write here, not stdout.")
@click.pass_obj
@fails_cleanly
def export_command(c: Ctx, names: tuple[str, ...], output: str | None) -> None:
    """The stored specs of every release (or those NAMEd) as one TOML file, for `dbanon apply`."""
    with c.db() as db:
        text = db.export(list(names))
    if output:
        with open(output, "w") as f:
            f.write(text)
    c.emit({"toml": text, "output": output}, lambda: None if output else click.echo(text, nl=False))


@main.command("apply")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--plan", "dry", is_flag=True, help="Print what would change; change nothing.")
@click.option("--prune", is_flag=True, help="Drop releases the file no longer lists.")
@click.pass_obj
@fails_cleanly
def apply_command(c: Ctx, file: str, dry: bool, prune: bool) -> None:
    """Make the catalog match FILE: publish, republish (as --replace), grant, revoke, schedule."""
    with c.db() as db:
        changes = db.apply(file, plan=dry, prune=prune)
    data = {"plan": dry, "changes": [vars(ch) for ch in changes if ch.action != "keep"],
            "kept": [ch.release for ch in changes if ch.action == "keep"]}  # fmt: skip

    def human() -> None:
        verb = "would" if dry else "did"
        for ch in changes:
            click.echo(f"{ch.action:<10} {catalog.quote_ident(ch.release)}"
                       + (f"  {ch.detail}" if ch.detail else ""))  # fmt: skip
        if not any(ch.action != "keep" for ch in changes):
            click.echo(f"no change: the catalog matches {file}")
        elif dry:
            click.echo(f"(plan: nothing changed; `dbanon apply {file}` {verb} the above)")

    c.emit(data, human)


# --- demo and benchmarks ------------------------------------------------------------------------


@main.command()
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


@main.group()
def bench() -> None:
    """Benchmarks of the algorithms on UCI Adult and the hospital table (in memory)."""


@main.group()
def experiment() -> None:
    """Reproductions of the papers' experiments (CSV and PNG)."""


for _runner in runners.benches().values():
    bench.add_command(runner_command(_runner))
for _runner in runners.experiments().values():
    experiment.add_command(runner_command(_runner))



























































@main.group("flags")
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
    from dbanon import flags

    with c.db() as db:
        rel = catalog.relation(db.conn, source)
        col = catalog.require_columns(catalog.columns(db.conn, rel), rel, [key])[0]
        n = flags.generate(db.conn, rel, col, columns, density, into, seed)
        db.conn.commit()
    c.emit({"flags": n, "into": into}, lambda: click.echo(f"flagged {n} values into {into}"))
