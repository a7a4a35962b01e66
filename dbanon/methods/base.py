"""What a publishing method is: the one interface between the lifecycle and an algorithm.

The lifecycle (dbanon.release) resolves a spec, asks the method to build its relation(s) aside
under build names, runs the checks the method names before anything is visible, swaps the built
relations in and records the run. It knows no method by name; a method is one module that
subclasses `Method` and registers an instance (dbanon.methods.register).

A method declares:
- `name`, `summary` (one line), the models it can `promises` and those it `requires`;
- its own `options` (name, type, default, help), which the CLI turns into `publish` flags and
  the spec stores under `options`;
- `objects(target)`: the names of the relations it publishes (Anatomy: NAME_qit and NAME_st),
  or `release_objects(conn, spec, target)` when they depend on the spec or the data;
- `validate(conn, r)`: refusals specific to it, before anything is written;
- `build(conn, r, ctx)`: CREATE its relations as `r.stored(ctx.made(obj))` (the private
  store, under a build name; consumers read them through views); returns metrics;
- `checks(r, built)`: the independent checks of what it promised, run by the lifecycle. The
  default checks every promised model on the first object, the released table itself; a
  method that promises no model (noise) names checks of its own;
- `recorded(conn, r, release_id)`: keep private state once the run is recorded (same
  transaction; e.g. a noise secret), by default nothing;
- `rechecking(conn, r, built)`: remake what its checks read besides the published relations
  (a view's snapshot, a run's staging table) for `dbanon check NAME --release`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import psycopg
from psycopg import sql

from dbanon.core.hierarchy import Hierarchy
from dbanon.core.spec import ReleaseSpec
from dbanon.db.catalog import CATEGORICAL, STORE_SCHEMA, Column, Relation
from dbanon.errors import DbanonError, ModelViolation, quote_name
from dbanon.models import PrivacyModel, sizes
from dbanon.models.base import CheckResult, Target
from dbanon.models.specs import MODEL_KINDS, kind_of

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Option:
    """A method's own option: `--NAME` on the CLI, `options[NAME]` in the spec."""

    name: str  # spec key, snake_case; the CLI flag is --name-with-dashes
    type: type  # int, float, str or bool
    default: Any
    help: str
    choices: tuple[str, ...] = ()
    # The range of a number, checked in `coerce` before anything runs: bounds, each inclusive
    # unless open. Every float must be finite whatever its range (nan passes any comparison).
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def range_text(self) -> str:
        """The range in words: 'at least 2', 'above 0', 'in [0, 1)', 'at most 10000'."""
        lo, hi = (None if b is None else str(b) if isinstance(b, int) else f"{b:g}"
                  for b in (self.low, self.high))  # fmt: skip
        if lo is not None and hi is not None:
            return f"in {'(' if self.low_open else '['}{lo}, {hi}{')' if self.high_open else ']'}"
        if lo is not None:
            return f"{'above' if self.low_open else 'at least'} {lo}"
        if hi is not None:
            return f"{'below' if self.high_open else 'at most'} {hi}"
        return "any number"

    def _in_range(self, x: float) -> bool:
        if not math.isfinite(x):
            return False
        if self.low is not None and (x <= self.low if self.low_open else x < self.low):
            return False
        return self.high is None or not (x >= self.high if self.high_open else x > self.high)

    def coerce(self, value: Any) -> Any:
        """A value from the CLI or a stored spec, checked; a one-line error naming the flag."""
        if value is None:
            return None
        if self.choices:
            if value not in self.choices:
                raise DbanonError(
                    f"{self.flag} must be one of {', '.join(self.choices)}, got {value!r}"
                )
            return value
        if self.type is bool:
            if not isinstance(value, bool):
                raise DbanonError(f"{self.flag} is a flag (true or false), got {value!r}")
            return value
        try:
            if self.type is int and (isinstance(value, bool) or float(value) != int(float(value))):
                raise ValueError
            out = self.type(value)
        except (TypeError, ValueError, OverflowError):  # int(inf) overflows
            kind = {int: "a whole number", float: "a number", str: "text"}[self.type]
            raise DbanonError(f"{self.flag} must be {kind}, got {value!r}") from None
        if self.type in (int, float) and not self._in_range(float(out)):
            finite = "a finite number " if not math.isfinite(float(out)) else ""
            raise DbanonError(f"{self.flag} must be {finite}{self.range_text()}, got {value!r}")
        return out

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "flag": self.flag,
            "type": self.type.__name__,
            "default": self.default,
            "choices": list(self.choices),
            "range": self.range_text() if self.type in (int, float) else None,
            "help": self.help,
        }


SEED = Option(
    "seed", int, None, "Random seed (default: a fresh secret one per run, recorded in the run).",
    low=0, high=2**63 - 1,
)


@dataclass(frozen=True)
class Built:
    """A relation built aside, in the private store (STORE_SCHEMA) under `build`; once swapped
    in, consumers read it through the view `name` in the target schema."""

    name: str
    build: str
    kind: str = "table"  # 'table' or 'view'


@dataclass
class BuildContext:
    """What the lifecycle hands a method's build: progress, timing laps and build names."""

    say: Progress
    lap: Callable[[str], None]
    build_names: Mapping[str, str]  # object name -> its build name in the private store
    built: list[Built] = field(default_factory=list)
    # The run's rows as arrays, for the map and the intersection guard, from a build that
    # holds them (dbanon.setlogic.grouped_map.Mapped); else they are read from `group_map`.
    mapped: Any = None
    # The first relation's classes (size -> classes over its QIs as released), counted by the
    # build from the rows it wrote: read by the figures, never by a check (which counts its own).
    classes: dict[int, int] | None = None
    # Per sensitive column released row by row: the share of released rows whose value no
    # other released row has, counted by the build where it can be as the release's GROUP BY
    # would: from the values it streamed where equal values are equal bytes
    # (dbanon.db.rows.equal_as_bytes), or from a projection's label classes, which use the
    # label's own equality. The gate's warning reads it instead of a GROUP BY of the release
    # (dbanon.lifecycle.identifying). None: not counted.
    unique_shares: dict[str, float] | None = None

    def build_name(self, obj: str) -> str:
        return self.build_names[obj]

    def made(self, obj: str, kind: str = "table") -> Built:
        """Record that the relation of `obj` was created under its build name."""
        b = Built(obj, self.build_names[obj], kind)
        self.built.append(b)
        return b


@dataclass(frozen=True)
class Check:
    """One verification the gate runs on the built relations before they become visible."""

    name: str
    run: Callable[[psycopg.Connection], CheckResult]


def model_check(model: PrivacyModel, target: Target) -> Check:
    return Check(model.name, lambda conn: model.check(conn, target))


class Method(ABC):
    """A publishing method (see the module docstring)."""

    name: ClassVar[str]
    summary: ClassVar[str]
    promises: ClassVar[tuple[str, ...]]  # model kinds (dbanon.models.specs.MODEL_KINDS)
    requires: ClassVar[tuple[str, ...]] = ()  # at least one model of these kinds must be asked
    options: ClassVar[tuple[Option, ...]] = ()
    randomised: ClassVar[bool] = False  # takes --seed; a fresh secret seed per run otherwise
    # The relations it publishes are its QIs generalised (True) or released as they are.
    generalises: ClassVar[bool] = True
    # How its relations read to the metrics (dbanon.metrics.queries.REGISTRY): "generalised"
    # (one table, QIs generalised per class), "anatomy", "cbg", "perturbed", ...
    shape: ClassVar[str] = "generalised"
    # It can release `--keep` columns beside its QIs (dbanon.lifecycle.identifying); the
    # anatomy family
    # cannot: its QI table and its sensitive table are joined by group, not by row.
    keeps: ClassVar[bool] = True
    # It releases sensitive values apart from the rows (the anatomy family's buckets): a
    # sensitive column unique for most rows is then no cause for a warning.
    sensitive_apart: ClassVar[bool] = False
    # It measures its numeric and date QIs (ranges, distances, noise): a QI without a hierarchy
    # holding Infinity, NaN or an infinite date is refused before the build (dbanon.db.source).
    # The anatomy family releases QIs as they are, and measures none.
    finite_qis: ClassVar[bool] = True
    # What it releases, column by column, and the attacker its guarantee holds against: the
    # README's table of releases (dbanon.methods.releases_table).
    releases: ClassVar[str] = ""
    attacker: ClassVar[str] = ""
    # Its own figures (keys of what `build` returns) that the publish's summary shows beside
    # the common ones, so `--json` reports them (safepub: its "dp" parameters).
    reported: ClassVar[tuple[str, ...]] = ()

    # --- declared -------------------------------------------------------------------------------

    @classmethod
    def all_options(cls) -> tuple[Option, ...]:
        return (*cls.options, SEED) if cls.randomised else cls.options

    @classmethod
    def option(cls, name: str) -> Option:
        for o in cls.all_options():
            if o.name == name:
                return o
        raise KeyError(name)

    @classmethod
    def describe(cls) -> dict[str, Any]:
        return {
            "name": cls.name,
            "summary": cls.summary,
            "promises": list(cls.promises),
            "promise_options": sorted({MODEL_KINDS[p].option for p in cls.promises}),
            "requires": list(cls.requires),
            "options": [o.describe() for o in cls.all_options()],
            "releases": cls.releases,
            "attacker": cls.attacker,
            "keeps": cls.keeps,
        }

    def compiled(self, options: Mapping[str, Any]) -> bool:
        """Whether a build with these options (as given: defaults not filled in) calls
        numba-compiled kernels. A publish sets numba's target up in a thread only then: the
        set-up costs 42 MB of resident set and a third of a second of a core, for nothing in a
        run that compiles no kernel. A method that calls one anyway pays the set-up there."""
        return True

    def objects(self, target: str) -> list[str]:
        """The relations this method publishes for a release whose target is `target`."""
        return [target]

    def release_objects(self, conn: psycopg.Connection, spec: Any, target: str) -> list[str]:
        """The relations of a release whose target is `target`, for a method whose relations
        depend on the spec or the data (local anatomy: one pair per flagged attribute); by
        default `objects(target)`. Called by resolve before `validate`."""
        return self.objects(target)

    # --- the lifecycle's calls --------------------------------------------------------------------

    def validate(self, conn: psycopg.Connection, r: Resolved) -> None:  # noqa: B027
        """Refuse, with a one-line DbanonError, what this method cannot publish."""

    @abstractmethod
    def build(self, conn: psycopg.Connection, r: Resolved, ctx: BuildContext) -> dict[str, Any]:
        """CREATE the release's relations under their build names (ctx.made for each); returns
        the method's own figures for the run record."""

    def checks(self, r: Resolved, built: list[Built]) -> list[Check]:
        """Every promised model on the first built relation, as consumers will read it; a
        model whose check counts the class sizes first, for the others to read."""
        target = replace(r.target, relation=self.checked_relation(r, built))
        return [model_check(m, target) for m in sorted(r.models, key=lambda m: not m.counts_sizes)]

    def checked_relation(self, r: Resolved, built: list[Built]) -> sql.Composable:
        """What the checks and figures read for the first built relation: the relation itself,
        or (a view) a snapshot the method made of it in the publish's transaction, so that a
        view is evaluated once to verify it rather than once per check."""
        return r.stored(built[0])

    def risk_target(
        self, conn: psycopg.Connection, r: Resolved, built: list[Built]
    ) -> Target | None:
        """The classes whose re-identification risk the run records (dbanon.metrics.risk): a
        grouping release's first relation over its QIs as released; None for a release whose
        QIs are not grouped (released as they are, perturbed)."""
        if not self.generalises:
            return None
        return Target(self.checked_relation(r, built), [c.name for c in r.qi])

    def group_map(self, r: Resolved) -> sql.Composable | None:
        """A relation of (key text, gid int): each source row's group in the built release, for
        methods whose groups persist across refreshes (dbanon.setlogic.composition); None
        otherwise."""
        return None

    def source_figures(self, r: Resolved) -> Callable[[psycopg.Connection], dict[str, Any]] | None:
        """Figures of the release that are figures of the source itself (a release that shows
        every row's QIs as they are has the source's classes): counted on the source beside
        the build, over the run's snapshot on a second backend (dbanon.db.aside), instead
        of on the release after it. None: none."""
        return None

    def privacy_cost(self, r: Resolved) -> tuple[float, float] | None:
        """The (ε, δ) a run spends of its source's privacy budget (dbanon.lifecycle.budget);
        None for a method that is not differentially private."""
        return None

    def recorded(  # noqa: B027
        self, conn: psycopg.Connection, r: Resolved, release_id: int
    ) -> None:
        """Keep what the method's next run needs, in the run's transaction (release_id known)."""

    def rechecking(  # noqa: B027
        self, conn: psycopg.Connection, r: Resolved, built: list[Built]
    ) -> None:
        """Before `checks` run on a published release (`built` names its relations as they
        are): remake, in the caller's transaction (rolled back after), whatever else the checks
        read, as the publish had it in its own transaction. By default nothing."""

    def figures(
        self, conn: psycopg.Connection, r: Resolved, built: list[Built], checked: dict[str, Any]
    ) -> dict[str, Any]:
        """rows, classes, min_class_size and max_class_size of the release as consumers read it:
        its first relation, GROUP BY its QIs as released (the released classes, whatever groups
        the method formed inside). A method whose release has no classes (noise) gives None for
        classes and the sizes."""
        return sizes.figures(sizes.histogram(conn, self.checked_relation(r, built),
                                             [c.name for c in r.qi]))  # fmt: skip


def class_sizes(
    conn: psycopg.Connection, rel: sql.Composable, by: list[sql.Composable],
    count: sql.Composable | None = None,
) -> dict[str, int]:  # fmt: skip
    """rows, classes, min_class_size and max_class_size of `rel` grouped by `by`, in one scan
    (`count`: a column giving how many rows each row stands for, as an Anatomy ST's)."""
    rows, classes, smallest, largest = conn.execute(
        sql.SQL(
            "SELECT coalesce(sum(n), 0), count(*), coalesce(min(n), 0), coalesce(max(n), 0) "
            "FROM (SELECT {n} AS n FROM {rel} GROUP BY {by}) g"
        ).format(
            n=sql.SQL("count(*)") if count is None else sql.SQL("sum({})").format(count),
            rel=rel, by=sql.SQL(", ").join(by),
        )  # fmt: skip
    ).fetchone()
    return {"rows": int(rows), "classes": int(classes), "min_class_size": int(smallest),
            "max_class_size": int(largest)}  # fmt: skip


def failed(release: str, check: Check, result: CheckResult) -> ModelViolation:
    return ModelViolation(
        f"release {quote_name(release)} failed its check of {check.name} ({result.figures}, worst "
        f"class: {result.worst_class}); the previous release is unchanged"
    )


def models_of_kind(models: list[PrivacyModel], *kinds: str) -> list[PrivacyModel]:
    return [m for m in models if kind_of(m).name in kinds]


def snapshot_view(conn: psycopg.Connection, into: sql.Identifier, view: sql.Composable,
                  rows: sql.Composable | None = None) -> None:  # fmt: skip
    """`into`: a temporary table (dropped at commit) of a live view's rows now, or of `rows`,
    a query of the same rows in any order: what a view release's checks and figures read."""
    from dbanon.db.settings import analyze_stage

    rows = rows if rows is not None else sql.SQL("SELECT * FROM {}").format(view)
    conn.execute(sql.SQL("CREATE TEMP TABLE {} ON COMMIT DROP AS {}").format(into, rows))
    analyze_stage(conn, into)


def count_rows(conn: psycopg.Connection, rel: sql.Composable) -> int:
    return int(conn.execute(sql.SQL("SELECT count(*) FROM {}").format(rel)).fetchone()[0])


@dataclass(frozen=True)
class Resolved:
    """A spec checked against the live database, with everything a method's build needs."""

    spec: ReleaseSpec
    method: Method
    source: Relation
    key: Column
    qi: list[Column]
    sensitive: list[Column]
    hierarchies: dict[str, Hierarchy]  # QI -> stored hierarchy (categorical QIs without: flat)
    models: list[PrivacyModel]
    options: dict[str, Any]  # the method's options, defaults filled in
    target_schema: str
    target_name: str
    objects: list[str]  # the relations this publish creates in target_schema
    previous: list[tuple[str, str]]  # (schema, name) of the release's objects as it is now
    grants: list[str]  # roles that read the release after this publish
    grant_changes: dict[str, list[str]]  # kept, added, revoked: roles compared with before
    rows: int
    seed: int | None  # the run's seed, for randomised methods
    regroup: bool = False  # this run regroups from scratch, whatever the refresh policy
    release_id: int | None = None  # None for a first publish
    new_source: bool = False  # redefined on another source or key: its earlier groups are moot
    # Progress of long phases (rows streamed, blocks clustered), on a terminal only.
    say: Callable[[str], None] = field(default=lambda _msg: None, compare=False, repr=False)
    keep: list[Column] = field(default_factory=list)  # --keep: released as they are
    # Where the built relations are: the private store while publishing (dbanon.release's
    # swap points the released views at them), the target schema when re-checking a release.
    build_schema: str = STORE_SCHEMA

    def ident(self, name: str) -> sql.Identifier:
        """A relation in the target schema (what consumers read)."""
        return sql.Identifier(self.target_schema, name)

    def stored(self, b: Built) -> sql.Identifier:
        """Where a built relation is, under its build name."""
        return sql.Identifier(self.build_schema, b.build)

    @property
    def released_columns(self) -> list[Column]:
        """The source columns a release shows of a row (QIs, sensitive, kept): what the map's
        fingerprint covers (dbanon.setlogic.composition.fingerprint)."""
        return [*self.qi, *self.sensitive, *self.keep]

    def is_categorical(self, col: Column) -> bool:
        return col.kind == CATEGORICAL or col.name in self.hierarchies

    def model(self, kind: str) -> PrivacyModel | None:
        """The promised model of a kind (dbanon.models.specs names), if any."""
        return next((m for m in self.models if kind_of(m).name == kind), None)

    @property
    def k(self) -> int | None:
        """The largest k among the promised models ((alpha,k) and (p,k) carry one too)."""
        ks = [m.k for m in self.models if isinstance(getattr(m, "k", None), int)]  # type: ignore[attr-defined]
        return max(ks) if ks else None

    @property
    def target(self) -> Target:
        """What the models check: the released QIs and the (first) sensitive column."""
        sensitive = self.sensitive[0].name if self.sensitive else None
        return Target(self.ident(self.target_name), [c.name for c in self.qi], sensitive)
