"""Releases: `publish`, `refresh`, `report`, `releases`, `evaluate`, `compare`, `drop`,
`grant`, `revoke`, `show`, `export`, `apply`.
"""

from __future__ import annotations

import json
import shlex
import sys
from datetime import datetime, timezone
from typing import Any

import click

from dbanon import methods
from dbanon.cli.audit import model_options, risk_lines
from dbanon.cli.common import (
    Command,
    Ctx,
    Seconds,
    Table,
    _timestamp,
    command,
    fails_cleanly,
    out,
    pairs,
    qi_list,
)
from dbanon.db import catalog
from dbanon.errors import DbanonError, quote_name
from dbanon.lifecycle import diffexposure
from dbanon.lifecycle.declare import release_spec
from dbanon.methods import Option
from dbanon.metrics.labels import FIGURES, SAME_AS


def print_publish(c: Ctx, summary: dict[str, Any]) -> None:
    def human() -> None:
        gcp = "" if summary["gcp"] is None else f", GCP {summary['gcp']:.2%}"
        classes = (
            "" if summary["classes"] is None
            else f" in {summary['classes']} classes (smallest {summary['min_class_size']})"
        )  # fmt: skip
        left_out = summary.get("suppressed_rows")
        rows = (
            f"{summary['rows']} of {summary['source_rows']} rows ({left_out} suppressed)"
            if left_out else f"{summary['rows']} rows"
        )  # fmt: skip
        out.print(
            f"published {quote_name(summary['release'])} as {', '.join(summary['objects'])}: "
            f"{rows}{classes}{gcp}, {summary['seconds']:.1f} s",
            markup=False,
        )
        changes = summary.get("grants") or {}
        for what in ("added", "revoked"):
            if changes.get(what):
                out.print(f"grants {what}: {_roles(changes[what])}", markup=False)
        if changes.get("kept"):
            out.print(f"grants kept: {_roles(changes['kept'])}", markup=False)
        for warning in summary.get("warnings") or []:
            if warning.startswith(diffexposure.PREFIX):  # about the policy, not this data
                click.echo(f"warning: {warning}", err=True)
            else:
                out.print(f"warning: {warning}", markup=False)

    c.emit(summary, human)


def method_params() -> list[click.Option]:
    """--algorithm, and one flag per option any registered method declares (help says which
    methods take it); publish refuses a flag the chosen method does not take."""
    seen: dict[str, tuple[Option, list[str]]] = {}
    defaults: dict[str, dict[str, Any]] = {}
    helps: dict[str, dict[str, str]] = {}
    choices: dict[str, dict[str, None]] = {}  # every owner's, in order (each method checks its own)
    for m in methods.methods().values():
        for o in m.all_options():
            seen.setdefault(o.name, (o, []))[1].append(m.name)
            defaults.setdefault(o.name, {})[m.name] = o.default
            helps.setdefault(o.name, {}).setdefault(o.help, m.name)
            choices.setdefault(o.name, {}).update(dict.fromkeys(o.choices or ()))
    params = [
        click.Option(
            ["--algorithm"], type=click.Choice(list(methods.methods())), default=methods.DEFAULT,
            show_default=True, help="The publishing method (`dbanon methods` lists them).",
        )
    ]  # fmt: skip
    for o, owners in seen.values():
        kind: Any = click.Choice(list(choices[o.name])) if o.choices else o.type
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


@command(cls=MethodCommand, epilog=None)
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
    theta_rule: str | None,
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
    spec = release_spec(
        name, source, key, qi, sensitive=sensitive, method=algorithm, k=k, l=l_, l_kind=l_kind,
        c=c_, t=t_, t_ground=t_ground, alpha=alpha, alpha_value=alpha_value, p=p_, theta=theta,
        sensitive_hierarchies=pairs(sensitive_hierarchies, "--sensitive-hierarchy"),
        category_level=category_level, category_width=category_width, theta_rule=theta_rule,
        options=options,
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


@command()
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

        from dbanon.lifecycle.schedule import exit_code

        def human() -> None:
            for r in results:
                extra = r.get("error") or r.get("next_due_at") or ""
                if r["outcome"] == "refreshed":
                    extra = f"{_figure(r['rows'])} rows"
                click.echo(f"{r['release']}: {r['outcome']}{' - ' + extra if extra else ''}")
                for w in r.get("warnings") or []:
                    if w.startswith(diffexposure.PREFIX):
                        click.echo(f"warning: {w}", err=True)

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


def _rounded(value: Any) -> Any:
    """Floats to 4 significant digits, inside dicts and lists too (0.3333333333333333 reads as
    0.3333)."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def _figure(value: Any) -> str:
    """A figure as `report` prints it: plain numbers as psql prints them (no thousands
    separator: a pipe reads them back), floats to 4 significant digits."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        return json.dumps(_rounded(value), default=str)
    return "-" if value is None else str(value)


# What the common rows of `report` mean (the method's own: dbanon.metrics.labels.FIGURES).
_MEANINGS = {
    "rows": "rows of the first released relation",
    "released classes": "rows with equal released QIs: what a consumer cannot tell apart",
    "internal groups": "the groups the method formed inside (two may be released alike)",
    "NCP (GCP)": "mean information loss per released value; 0 none, 100% all",
    "source rows": "rows of the source the run read",
    "suppressed rows": "source rows the release leaves out",
    "risk threshold": "a record is at risk when 1 / its class size is above this",
    "prosecutor risk": "1 / class size of a record, over the QIs and kept columns as released",
    "sample uniqueness": "share of released rows alone in their class (QIs and kept columns)",
}


def _suppressed(data: dict[str, Any]) -> int | None:
    rows, source = data.get("rows"), data.get("source_rows")
    return None if rows is None or source is None else max(source - rows, 0)


def _method_rows(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The method's own figures under one name each (FIGURES), rounded; one that repeats a
    common figure (suppressed rows, the loss that is the GCP, a group DM equal to the DM) is
    left out: `report --json` has every one under its key."""
    metrics = data["method_metrics"]
    out = []
    for key, value in metrics.items():
        if key in ("suppressed", "suppressed_rows") and data.get("source_rows") is not None:
            continue
        if key in SAME_AS and value == data.get(SAME_AS[key]):
            continue
        if key == "discernibility" and value == metrics.get("dm"):
            continue
        label, meaning = FIGURES.get(key, (key.replace("_", " "), ""))
        out.append((label, _figure(value), meaning))
    return sorted(out)


@command()
@click.argument("name")
@click.option("--queries", "n", type=click.IntRange(1), default=1000, show_default=True,
              help="Random SUM queries in the workload.")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the workload.")
@click.pass_obj
@fails_cleanly
def evaluate(c: Ctx, name: str, n: int, seed: int) -> None:
    """Query error of release NAME (a seeded SUM workload, bounds against the source's exact
    answers), with its DM and the exposure its run recorded."""
    from dbanon.lifecycle.evaluate import evaluate as run

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


@command()
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
        left_out = _suppressed(data)
        if left_out is not None:
            rows.insert(4, ("suppressed rows", _figure(left_out)))
        rows += risk_lines(data.get("risk"))
        for label, value in rows:
            table.add_row(label, value, _MEANINGS.get(label, ""))
        for label, value, meaning in _method_rows(data):
            table.add_row(label, value, meaning)
        out.print(table)
        if data["last_failure"]:  # a newer run did not replace the release in place
            out.print(f"warning: {data['last_failure']['message']}", markup=False)
        for w in data["warnings"]:
            out.print(f"warning: {w}", markup=False)

    c.emit(data, human)


@command()
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


@command("releases")
@click.pass_obj
@fails_cleanly
def releases_command(c: Ctx) -> None:
    """Every release: method, promises, objects, latest run."""
    with c.db() as db:
        rows = db.releases()

    def human() -> None:
        table = Table("name", "method", "promises", "objects", "last run", "at", "rows")
        if out.is_terminal:  # a name is what a reader looks for: whole, never cut to fit
            for i in (0, 5, 6):
                table.columns[i].no_wrap = True
            table.columns[0].min_width = max((len(r["name"]) for r in rows), default=4)
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


@command("drop")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask.")
@click.option("--wait", type=Seconds(0), default=0, help="Seconds to wait for a run of NAME.")
@click.pass_obj
@fails_cleanly
def drop_command(c: Ctx, name: str, yes: bool, wait: float) -> None:
    """Drop release NAME: its released relations and its catalog entry (runs included)."""
    if not yes:
        if c.json or not sys.stdin.isatty():
            raise DbanonError(f"dropping release {quote_name(name)} needs --yes when nobody can "
                "be asked")
        click.confirm(f"drop release {quote_name(name)} and its released relations?", abort=True)
    with c.db() as db:
        dropped = db.drop(name, wait)
    c.emit(
        {"release": name, "dropped": dropped},
        lambda: click.echo(f"dropped release {quote_name(name)}: "
            f"{', '.join(dropped) or 'no relations'}"),
    )


@command("grant")
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
    c.emit(data, lambda: click.echo(_granted(name, "granted to", data["added"], data["already"],
                                             "already granted to", data["grants"])))  # fmt: skip


@command("budget")
@click.argument("source")
@click.option("--epsilon", type=float, help="The ε every DP release of SOURCE may spend in all.")
@click.option("--delta", type=float, help="The δ they may spend in all (default: unbounded).")
@click.pass_obj
@fails_cleanly
def budget_command(c: Ctx, source: str, epsilon: float | None, delta: float | None) -> None:
    """Set (--epsilon) or show the privacy budget of SOURCE: each publish and refresh of a
    differentially private release of it spends its ε (sequential composition); a run that
    would overspend is refused (exit 4)."""
    with c.db() as db:
        data = db.budget(source, epsilon, delta)

    def human() -> None:
        if data["epsilon"] is None:
            click.echo(f"{data['source']}: no budget; spent ε={data['spent_epsilon']:g} over "
                       f"{data['runs']} run(s)")  # fmt: skip
            return
        click.echo(f"{data['source']}: budget ε={data['epsilon']:g}, spent "
                   f"{data['spent_epsilon']:g} over {data['runs']} run(s), left "
                   f"{data['left_epsilon']:g}")  # fmt: skip

    c.emit(data, human)


def _roles(roles: list[str]) -> str:
    return ", ".join(map(catalog.quote_ident, roles))


def _granted(
    name: str, did: str, changed: list[str], unchanged: list[str], why: str, grants: list[str]
) -> str:
    """What a grant or revoke did, then who reads the release now, role names as SQL needs
    them: `release 'r' revoked from "Data Team" (now granted to analysts)`."""
    parts = [f"{did} {_roles(changed)}"] if changed else []
    if unchanged:
        parts.append(f"{why} {_roles(unchanged)}: nothing to do")
    now = f"now granted to {_roles(grants)}" if grants else "now granted to no role"
    return f"release {quote_name(name)} {'; '.join(parts)} ({now})"


@command("revoke")
@click.argument("name")
@click.argument("roles", nargs=-1, required=True)
@click.option("--wait", type=Seconds(0), default=0, help="Seconds to wait for a run of NAME.")
@click.pass_obj
@fails_cleanly
def revoke_command(c: Ctx, name: str, roles: tuple[str, ...], wait: float) -> None:
    """Stop ROLES reading release NAME, now and after every refresh (no rebuild)."""
    with c.db() as db:
        data = db.revoke(name, roles, wait=wait)
    c.emit(data, lambda: click.echo(_granted(name, "revoked from", data["revoked"],
                                             data["not_granted"], "not granted to",
                                             data["grants"])))  # fmt: skip


@command("show")
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


@command("export")
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


@command("apply")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--plan", "dry", is_flag=True, help="Print what would change; change nothing.")
@click.option("--prune", is_flag=True, help="Drop releases the file no longer lists.")
@click.option("--yes", is_flag=True, help="With --prune: drop without asking.")
@click.pass_obj
@fails_cleanly
def apply_command(c: Ctx, file: str, dry: bool, prune: bool, yes: bool) -> None:
    """Make the catalog match FILE: import its hierarchies, publish, republish (as --replace),
    grant, revoke, schedule; --prune drops what it does not list. The whole file is checked
    against the database first: one bad release and nothing changes (exit 2). A change that
    fails after that stops the apply: exit 5 when some were applied, listing them."""

    def confirm(drops: list[Any]) -> None:  # as `drop` asks: never silently without a terminal
        names = ", ".join(ch.what() for ch in drops)
        if yes:
            return
        if c.json or not sys.stdin.isatty():
            raise DbanonError(f"apply --prune would drop release(s) {names}: "
                              "needs --yes when nobody can be asked")  # fmt: skip
        click.confirm(f"drop release(s) {names} and their released relations?", abort=True)

    with c.db() as db:
        changes = db.apply(file, plan=dry, prune=prune, confirm=confirm)
    made = [vars(ch) for ch in changes if ch.action != "keep"]
    data = {"plan": dry, "changes": made, "applied": [] if dry else made,
            "kept": [ch.release for ch in changes if ch.action == "keep"]}  # fmt: skip

    def human() -> None:
        for ch in changes:
            click.echo(f"{ch.action:<10} {ch.what()}" + (f"  {ch.detail}" if ch.detail else ""))
        if not any(ch.action != "keep" for ch in changes):
            click.echo(f"no change: the catalog matches {file}")
        elif dry:
            again = shlex.join(["dbanon", "apply", file, *(["--prune"] if prune else [])])
            click.echo(f"(plan: nothing changed; `{again}` would make the changes above)")

    c.emit(data, human)
