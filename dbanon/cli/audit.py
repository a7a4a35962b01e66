"""`dbanon check`: the privacy models and the re-identification risk of any relation."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from dbanon.cli.common import Ctx, Table, cells, command, fails_cleanly, out, pairs, qi_list
from dbanon.errors import DbanonError
from dbanon.models import L_KINDS, T_GROUNDS
from dbanon.models.thetak import NEED_RULES


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
        click.option(
            "--theta-rule",
            metavar="|".join(NEED_RULES),  # validated by the model: one line, exit 2
            help="(θ,k)'s need_c: paper (default; min(⌊k/θ⌋, the category's values)) or "
            "relaxed (capped by what the relation's classes of k rows can hold).",
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


@command()
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
@click.option(
    "--worst", is_flag=True,
    help="Also name each model's worst class: the one furthest from holding (nearest to failing "
    "when the model holds). Costs one more pass over the classes.",
)  # fmt: skip
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
    theta_rule: str | None,
    count: str | None,
    buckets: str | None,
    worst: bool,
    **risk_args: Any,
) -> None:
    """Audit any table or view: exit 0 if the models hold, 1 if not (--risk: also measure
    its re-identification risk, a figure and no verdict)."""
    risk = risk_asked(is_release, qi, risk_args)
    results = []
    if is_release:
        from dbanon.lifecycle.verify import recheck

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
                theta_rule=theta_rule,
                l=l_, l_kind=l_kind or "distinct", c=c_, t=t_, alpha=alpha, p=p_,
                t_ground=t_ground, alpha_value=alpha_value,
                worst="always" if worst else "never",
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
        """A table of (model, figure, value): on a terminal drawn, piped tab-separated lines
        (the README's promise; it printed indented `figure: value` lines)."""
        table = Table("model", "figure", "value")
        for r in results:
            table.add_row(*cells(r.model, "holds", "yes" if r.holds else "no"))
            for key, value in r.figures.items():
                table.add_row(*cells(r.model, key.replace("_", " "), value))
            if r.worst_class is not None:
                table.add_row(*cells(r.model, "worst class", r.worst_class))
            elif not r.holds and not worst:
                table.add_row(*cells(r.model, "worst class",
                                     "- (--worst names the class furthest from holding)"))
        for label, text in risk_lines(data.get("risk")):
            table.add_row(*cells("re-identification risk", label, text))
        out.print(table)

    c.emit(data, human)
    sys.exit(0 if holds else 1)
