"""The library API: every CLI command is one call here (the CLI only parses and prints)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import nullcontext
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import psycopg

from dbanon.core.hierarchy import Hierarchy
from dbanon.db import catalog
from dbanon.db.connection import connect, resolve_dsn
from dbanon.errors import DbanonError
from dbanon.models import CheckResult, audit, from_options
from dbanon.models.base import Target
from dbanon.models.categories import named_hierarchy
from dbanon.models.crossbucket import BUCKET_ID, BucketTarget
from dbanon.models.split import backends

if TYPE_CHECKING:  # publishing and scheduling load on first use: an audit needs neither
    from dbanon.core.spec import ReleaseSpec
    from dbanon.lifecycle.publish import PublishResult
    from dbanon.lifecycle.resolve import Progress


class Database:
    """A PostgreSQL database that dbanon audits and publishes releases into."""

    def __init__(self, dsn: str | None = None) -> None:
        self.dsn = resolve_dsn(dsn)
        self._conn: psycopg.Connection | None = None

    @property
    def conn(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self.dsn)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def init(self) -> str:
        """Create or upgrade the catalog; returns the schema revision."""
        return catalog.init(self.dsn)

    def import_hierarchy(
        self, name: str, path: str | Path, *, replace: bool = False, force: bool = False,
        stored: bool = False,
    ) -> Any:  # fmt: skip
        """Store a hierarchy file as NAME; replacing one that releases use needs `force` (they
        keep the version they were verified with until their next refresh). Returns the
        Hierarchy, with `stored` also what was stored (version, changed, releases using it)."""
        h = Hierarchy.from_csv(name, path)
        try:
            info = catalog.store_hierarchy(self.conn, h, replace=replace, force=force)
            self.conn.commit()
        except BaseException:
            self.conn.rollback()
            raise
        return (h, info) if stored else h

    def hierarchies(self) -> list[dict[str, Any]]:
        try:
            return catalog.list_hierarchies(self.conn)
        finally:
            self.conn.rollback()

    def hierarchy(self, name: str) -> dict[str, Any]:
        """A stored hierarchy as ARX rows (leaf first), with the releases that use it."""
        try:
            h = catalog.load_hierarchy(self.conn, name)
            rows = [[h.labels[n] for n in h.ancestors(leaf)] for leaf in h.leaves.values()]
            return {
                "name": name,
                "height": h.height,
                "leaves": len(h.leaves),
                "rows": sorted(rows),
                "used_by": catalog.hierarchy_users(self.conn, name),
                "version": h.version,
                # release -> the version it was verified with (older ones until it refreshes)
                "pinned_by": dict(self.conn.execute(
                    "SELECT name, hierarchy_versions ->> %s FROM dbanon.release "
                    "WHERE hierarchy_versions ? %s ORDER BY name", [name, name],
                ).fetchall()),
            }
        finally:
            self.conn.rollback()

    def drop_hierarchy(self, name: str) -> None:
        try:
            catalog.drop_hierarchy(self.conn, name)
            self.conn.commit()
        except BaseException:
            self.conn.rollback()
            raise

    def check(
        self,
        relation: str,
        qi: Sequence[str],
        *,
        sensitive: str | None = None,
        count: str | None = None,
        sensitive_hierarchies: dict[str, str] | None = None,
        buckets: str | None = None,
        worst: Literal["failing", "always", "never"] = "failing",
        **options: Any,
    ) -> list[CheckResult]:
        """Audit any table or view against the models the options name (see
        dbanon.models.from_options: k, l, l_kind, c, t, alpha, p, theta, ...); the (θ,k)
        model reads its categories from `sensitive_hierarchies` ({column: hierarchy}); the
        cross-bucket l-diversity reads the ST named by `buckets` beside the QIT `relation`.
        `worst` says when a result names its worst class (`Target.worst`)."""
        named = named_hierarchy(sensitive_hierarchies, [sensitive] if sensitive else [])
        if named is not None:
            options["sensitive_hierarchy"] = named
        models = from_options(**options)
        if not models:
            raise DbanonError("name at least one model to check (--k, --l, --t, ...)")
        try:
            rel = catalog.relation(self.conn, relation)
            cols = catalog.columns(self.conn, rel)
            extra = [c for c in (None if buckets else sensitive, count) if c]
            catalog.require_columns(cols, rel, [*qi, *extra])
            if buckets is not None:  # a cross-bucket release: QIT `relation`, ST `buckets`
                st = catalog.relation(self.conn, buckets)
                needed = [BUCKET_ID, *([sensitive] if sensitive else [])]
                catalog.require_columns(catalog.columns(self.conn, st), st, needed)
                target = BucketTarget(rel.ident, list(qi), sensitive, count, st.ident, worst=worst)
                return audit(self.conn, target, models)
            # a big table's classes are counted in parts at once; naming the worst class of
            # every check reads them in one query anyway
            parts = backends(self.conn, self.dsn, rel, qi) if worst != "always" else nullcontext()
            with parts as split:
                target = Target(rel.ident, list(qi), sensitive, count, worst=worst, split=split)
                return audit(self.conn, target, models)
        finally:
            self.conn.rollback()

    def risk(
        self,
        relation: str,
        qi: Sequence[str],
        *,
        threshold: float | None = None,
        population: str | None = None,
        population_size: float | None = None,
        count: str | None = None,
    ) -> dict[str, Any]:
        """Re-identification risk of any table or view over `qi` (dbanon.metrics.risk):
        prosecutor risk; journalist and marketer risk against a `population` relation holding
        the same QIs; Zayatz's population-uniqueness estimate given a population."""
        from dbanon.metrics import risk

        try:
            rel = catalog.relation(self.conn, relation)
            catalog.require_columns(catalog.columns(self.conn, rel), rel,
                                    [*qi, *([count] if count else [])])  # fmt: skip
            pop = None
            if population is not None:
                prel = catalog.relation(self.conn, population)
                catalog.require_columns(catalog.columns(self.conn, prel), prel, list(qi))
                pop = Target(prel.ident, list(qi))
            return risk.measure(
                self.conn, Target(rel.ident, list(qi), None, count),
                threshold=risk.DEFAULT_THRESHOLD if threshold is None else threshold,
                population=pop, population_size=population_size,
            )  # fmt: skip
        finally:
            self.conn.rollback()

    def publish(
        self,
        spec: ReleaseSpec,
        progress: Progress | None = None,
        *,
        replace: bool = False,
        revoke: Sequence[str] = (),
        wait: float = 0.0,
        allow_composition: bool = False,
        grant_live: bool = False,
    ) -> PublishResult:
        """Publish a release; an existing name needs `replace` (its grants are kept unless
        named in `revoke`); another run of it is waited for up to `wait` seconds; a live
        view is granted to a new role only with `grant_live`."""
        from dbanon.lifecycle.diffexposure import with_warning
        from dbanon.lifecycle.publish import publish

        return with_warning(spec, publish(
            self.conn, spec, progress, replace=replace, revoke=revoke, wait=wait,
            allow_composition=allow_composition, grant_live=grant_live,
        ))  # fmt: skip

    def refresh(
        self,
        name: str,
        progress: Progress | None = None,
        *,
        wait: float = 0.0,
        regroup: bool = False,
        allow_composition: bool = False,
    ) -> PublishResult:
        """Rebuild a release as its spec says; `regroup` starts its groups over for this run
        (refused if a consumer keeping earlier releases could then break the promise, unless
        `allow_composition`)."""
        from dbanon.lifecycle.catalogue import load_spec
        from dbanon.lifecycle.diffexposure import with_warning
        from dbanon.lifecycle.refresh import refresh

        result = refresh(
            self.conn, name, progress, wait=wait, regroup=regroup,
            allow_composition=allow_composition,
        )  # fmt: skip
        try:
            return with_warning(load_spec(self.conn, name), result)
        finally:
            self.conn.rollback()

    def refresh_due(
        self,
        *,
        now: datetime | None = None,
        force: bool = False,
        progress: Progress | None = None,
    ) -> list[dict[str, Any]]:
        """Refresh every scheduled release that is due (at `now`, default the present)."""
        from dbanon.lifecycle import schedule

        return schedule.refresh_due(self.conn, now=now, force=force, progress=progress)

    def schedule(self, name: str, *, every: str | None = None, cron: str | None = None) -> dict:
        from dbanon.lifecycle import schedule

        try:
            data = schedule.set_schedule(self.conn, name, every=every, cron=cron)
            self.conn.commit()
            return data
        except BaseException:
            self.conn.rollback()
            raise

    def unschedule(self, name: str) -> bool:
        from dbanon.lifecycle import schedule

        try:
            cleared = schedule.clear_schedule(self.conn, name)
            self.conn.commit()
            return cleared
        except BaseException:
            self.conn.rollback()
            raise

    def schedules(self, now: datetime | None = None) -> list[dict[str, Any]]:
        from dbanon.lifecycle import schedule

        try:
            return schedule.schedules(self.conn, now)
        finally:
            self.conn.rollback()

    def compare(
        self,
        source: str,
        release: str,
        columns: Sequence[str],
        clusters: int,
        algorithm: str = "kmeans",
        seed: int = 0,
    ) -> dict[str, Any]:
        """Misclassification of a clustering of a perturbed release against its source (rows
        paired through the catalog's private map; clusters matched by the Hungarian method)."""
        from dbanon.compare import compare

        try:
            return compare(self.conn, source, release, columns, clusters, algorithm, seed)
        finally:
            self.conn.rollback()

    def report(self, name: str) -> dict[str, Any]:
        from dbanon.lifecycle.releases import report

        try:
            return report(self.conn, name)
        finally:
            self.conn.rollback()

    def releases(self) -> list[dict[str, Any]]:
        from dbanon.lifecycle.releases import releases

        try:
            return releases(self.conn)
        finally:
            self.conn.rollback()

    def grant(
        self, name: str, roles: Sequence[str], *, wait: float = 0.0, grant_live: bool = False
    ) -> dict[str, Any]:
        """Grant release `name` to `roles`: its spec and its relations at once, no rebuild (a
        live view only with `grant_live`: see dbanon.lifecycle.grants.refuse_live)."""
        from dbanon.lifecycle.grants import grant

        return grant(self.conn, name, roles, wait, grant_live=grant_live)

    def budget(
        self, source: str, epsilon: float | None = None, delta: float | None = None
    ) -> dict[str, Any]:
        """Set (with `epsilon`) or show the privacy budget of `source`: what its differentially
        private releases may spend together, spent and left (dbanon.lifecycle.budget)."""
        from dbanon.lifecycle.budget import set_budget

        try:
            out = set_budget(self.conn, source, epsilon, delta)
            self.conn.commit()
            return out
        finally:
            self.conn.rollback()

    def revoke(self, name: str, roles: Sequence[str], *, wait: float = 0.0) -> dict[str, Any]:
        """Revoke release `name` from `roles`: its spec and its relations at once."""
        from dbanon.lifecycle.grants import revoke

        return revoke(self.conn, name, roles, wait)

    def show(self, name: str) -> dict[str, Any]:
        """The stored spec of release `name`, as JSON and as `publish` arguments."""
        from dbanon.lifecycle.grants import show

        try:
            return show(self.conn, name)
        finally:
            self.conn.rollback()

    def export(self, names: Sequence[str] = ()) -> str:
        """The stored specs (every release, or those named) as one TOML document."""
        from dbanon.lifecycle import specfile

        try:
            return specfile.export(self.conn, list(names) or None)
        finally:
            self.conn.rollback()

    def apply(
        self, path: str, *, plan: bool = False, prune: bool = False,
        confirm: Callable[[list[Any]], None] | None = None,
    ) -> list[Any]:  # fmt: skip
        """Make the catalog match the TOML file at `path` (`plan`: only say what would change;
        `prune`: drop releases the file does not list). The whole file is validated against the
        database first (specfile.Invalid: nothing changed); `confirm` then sees the drops and
        may refuse them by raising. Returns the changes (specfile.Stopped if one fails)."""
        from dbanon.lifecycle import specfile

        wanted = specfile.read(path)
        changes = specfile.plan(self.conn, wanted, prune)
        specfile.validate(self.conn, wanted, changes)
        drops = [c for c in changes if c.action == "drop"]
        if not plan and drops and confirm is not None:
            confirm(drops)
        if not plan:
            specfile.apply(self, wanted, changes)
        return changes

    def drop(self, name: str, wait: float = 0.0) -> list[str]:
        """Drop a release's relations and its catalog entry; returns the relations dropped
        (runs.Busy while a run of it is in progress, after waiting up to `wait` seconds)."""
        from dbanon.lifecycle.releases import drop

        return drop(self.conn, name, wait)

    def uninstall(self) -> dict[str, Any]:
        """Drop every release, then the catalog (see dbanon.lifecycle.uninstall)."""
        from dbanon.lifecycle.uninstall import uninstall

        return uninstall(self.conn, self.dsn)
