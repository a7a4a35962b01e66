"""Which classes to suppress so that what remains satisfies every model, in one SQL query.

A live view (`release_select` in dbanon.setlogic.fulldomain) evaluates this at every read, so a
release keeps its promise whatever happens to its source since it was published.

Local models (k-anonymity, l-diversity, (alpha,k), (p,k)) judge a class by its own rows only: a
class that passes passes in any relation that holds it whole, so one filter suffices. A model
that `needs_overall` (t-closeness) judges a class against the distribution of the relation it
sits in, and that relation is what is left *after* suppression. `dbanon check --t` on the view
measures exactly that, so the filter iterates:

    S_0     = the classes that pass every local model,
    S_{i+1} = the classes of S_i that pass every global model against the distribution of S_i,

and keeps S_{N-1} if S_N = S_{N-1}, else nothing (N = `passes`).

Why the promise then holds: when S = S_{N-1} = S_N is kept, every class of S passes the global
models against the distribution of S itself, which is the relation shown; the test is the same
`ClassTest` SQL `check` runs, over the same classes and the same sensitive values (a weighted
cell stands for its rows, which changes no count), and S is within S_0, so the local models hold
too. When nothing is kept, every model holds vacuously: `check` of an empty relation holds. The
S_i only shrink, so they stop changing after at most |S_0| passes; N bounds the work per read
and fails closed beyond it. A pass after the sequence has settled reads an empty input (its
input is gated on the previous pass having removed something), so settled passes cost nothing.
In practice the first pass removes the classes that fail against the full distribution and the
second confirms that the distribution of the rest still holds them.

Classes are matched by a number (dense_rank over the QI values, in which NULLs are peers),
never with `=` or IN on the QI values themselves, so a NULL QI is a class like any other.
"""

from __future__ import annotations

from collections.abc import Sequence

from psycopg import sql

from dbanon.errors import DbanonError
from dbanon.models.base import PrivacyModel, Target

# Passes of the global models before the filter gives up and keeps nothing (see above).
PASSES = 6

_CELLS = sql.Identifier("dbanon_keep_cells")


def _keep(i: int) -> sql.Identifier:
    return sql.Identifier(f"dbanon_keep_{i}")


def _count(i: int) -> sql.Composable:
    return sql.SQL("(SELECT count(*) FROM {})").format(_keep(i))


def _passing(models: Sequence[PrivacyModel], target: Target) -> sql.Composable:
    """SELECT c: the classes of `target` (whose only QI is the class number) passing all."""
    selects = [sql.SQL("({})").format(m.passing_classes(target)) for m in models]
    return sql.SQL("SELECT q1 AS c FROM ({}) dbanon_pass").format(
        sql.SQL(" INTERSECT ").join(selects)
    )


def kept_classes(
    target: Target, models: Sequence[PrivacyModel], *, passes: int = PASSES
) -> sql.Composable:
    """A SELECT of q1..qn, the QI values of the classes of `target` whose rows, shown together
    and without the others, satisfy every model, as each model's `check` measures it (see the
    module doc). Reads `target` once; usable as a subquery anywhere, e.g. `x IN (...)` with x a
    class number (match rows to it NULL-safely: IN on NULL QI values matches nothing)."""
    if passes < 1:
        raise ValueError(f"passes must be at least 1, got {passes}")
    for m in models:
        if m.needs_sensitive and target.sensitive is None:
            raise DbanonError(f"{m.name} needs a sensitive attribute")
    q = target.alias_list
    s = sql.SQL(", s") if target.sensitive is not None else sql.SQL("")
    cells = sql.SQL(
        """{cells} AS MATERIALIZED (
             SELECT dense_rank() OVER (ORDER BY {q}) AS c, {q}{s}, w
             FROM (SELECT {q}{s}, {rows} AS w FROM {src} GROUP BY {q}{s}) x)"""
    ).format(cells=_CELLS, q=q, s=s, rows=target.rows, src=target.source())

    def cell_target(where: sql.Composable | None = None) -> Target:
        """The cells (of the classes satisfying `where`) as a target whose only QI is the
        class number, each cell weighted by its rows."""
        rel = sql.SQL("(SELECT c{s}, w FROM {cells}{where}) dbanon_cells").format(
            s=s,
            cells=_CELLS,
            where=sql.SQL(" WHERE {}").format(where) if where is not None else sql.SQL(""),
        )
        return Target(rel, ["c"], "s" if target.sensitive is not None else None, count="w")

    local = [m for m in models if not m.needs_overall]
    overall = [m for m in models if m.needs_overall]
    every = cell_target()
    ctes = [cells]
    if local:
        ctes.append(sql.SQL("{} AS MATERIALIZED ({})").format(_keep(0), _passing(local, every)))
    else:
        ctes.append(
            sql.SQL("{} AS MATERIALIZED (SELECT DISTINCT c FROM {})").format(_keep(0), _CELLS)
        )
    last = 0
    for i in range(passes if overall else 0):
        within = sql.SQL("c IN (SELECT c FROM {})").format(_keep(i))
        if i == 0:
            body = _passing(overall, cell_target(within))
        else:  # settled (the last pass removed nothing): the same set, and no work
            settled = sql.SQL("{} = {}").format(_count(i), _count(i - 1))
            body = sql.SQL("SELECT c FROM {keep} WHERE {settled} UNION ALL ({again})").format(
                keep=_keep(i),
                settled=settled,
                again=_passing(
                    overall, cell_target(sql.SQL("{} AND NOT {}").format(within, settled))
                ),
            )
        ctes.append(sql.SQL("{} AS MATERIALIZED ({})").format(_keep(i + 1), body))
        last = i + 1
    if last:
        # S_{N-1} only if S_N equals it; S_N is within S_{N-1}, so equal counts mean equal sets.
        final = sql.SQL("SELECT c FROM {} WHERE {} = {}").format(
            _keep(last), _count(last), _count(last - 1)
        )
    else:
        final = sql.SQL("SELECT c FROM {}").format(_keep(0))
    return sql.SQL("WITH {ctes} SELECT DISTINCT {q} FROM {cells} WHERE c IN ({final})").format(
        ctes=sql.SQL(", ").join(ctes), q=q, cells=_CELLS, final=final
    )
