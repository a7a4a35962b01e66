"""Method `anatomy` (Xiao & Tao 2006): QIs released unchanged in NAME_qit (with a group id),
sensitive values per group in NAME_st; bucket ids from one window function in PostgreSQL."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from dbanon.errors import DbanonError
from dbanon.methods import register
from dbanon.methods.base import BuildContext, Built, Check, Method, class_sizes
from dbanon.models.base import CheckResult, Target

if TYPE_CHECKING:
    from dbanon.methods.base import Resolved


class Anatomy(Method):
    name = "anatomy"
    summary = (
        "Anatomy (Xiao & Tao 2006): bucket ids from one window function (`row_number() over "
        "(order by sa, random())` modulo ⌊n/l⌋); publishes `NAME_qit` (QIs, group_id) and "
        "`NAME_st` (group_id, sensitive value, count); a table that is not l-eligible is "
        "refused, naming the value and its share"
    )
    promises = ("frequency-l-diversity",)
    requires = ("frequency-l-diversity",)
    randomised = True
    generalises = False
    shape = "anatomy"
    keeps = False
    sensitive_apart = True
    finite_qis = False  # its QIs are released as they are, never measured
    releases = (
        "`NAME_qit`: the QIs as they are and a group id; `NAME_st`: per group, each sensitive "
        "value and its count (no `--keep`)"
    )
    attacker = (
        "knows a target's QIs and that they are in the table: their sensitive value with "
        "probability at most 1/l"
    )

    def objects(self, target: str) -> list[str]:
        return [f"{target}_qit", f"{target}_st"]

    def _l(self, r: Resolved) -> int:
        return int(r.models[0].l)  # type: ignore[attr-defined]

    def validate(self, conn: psycopg.Connection, r: Resolved) -> None:
        from dbanon.setlogic.anatomy import check_eligible

        ell = r.models[0].l  # type: ignore[attr-defined]
        if ell != int(ell):
            raise DbanonError(f"--algorithm anatomy needs a whole --l, got {ell}")
        check_eligible(conn, r.source, r.sensitive[0], int(ell))

    def build(self, conn: psycopg.Connection, r: Resolved, ctx: BuildContext) -> dict[str, Any]:
        from dbanon.db.rows import equal_as_bytes
        from dbanon.setlogic import anatomy

        ctx.say(f"bucketing {r.rows} rows for l={self._l(r)}")
        qit, st = ctx.made(r.objects[0]), ctx.made(r.objects[1])
        result = anatomy.build_anatomy(
            conn, r.source, r.qi, r.sensitive[0], self._l(r), r.stored(qit),
            r.stored(st), r.seed or 0, eligible=True,  # validate() checked this snapshot
            count_dm=equal_as_bytes(conn, r.source, r.qi),  # else counted beside the build
        )  # fmt: skip
        ctx.lap("materialise")
        # The QIs are released unchanged: no generalisation loss, the loss is in the association.
        dm = {} if result.dm is None else {"dm": result.dm}
        return {"gcp": 0.0, "groups": result.groups, "residual_rows": result.residual_rows, **dm}

    def source_figures(self, r: Resolved) -> Any:
        """DM: the QIT shows every source row's QIs as they are, so its classes of equal QI
        values are the source's (the same GROUP BY, over the same values of the same types).
        Where equal values are equal bytes the build counts them from the rows it streamed;
        else a GROUP BY of the source beside the build."""
        from dbanon.db.rows import equal_as_bytes
        from dbanon.metrics.exposure import discernibility

        names = [c.name for c in r.qi]
        return lambda conn: ({} if equal_as_bytes(conn, r.source, r.qi)
                             else {"dm": discernibility(conn, r.source.ident, names)})  # fmt: skip

    def checks(self, r: Resolved, built: list[Built]) -> list[Check]:
        """Frequency l-diversity of ST (weighted by its count column), and QIT and ST agreeing
        on every group's size (else ST would misstate the odds)."""
        from dbanon.db.settings import local_settings
        from dbanon.setlogic.anatomy import COUNT, GROUP_ID, verify_anatomy

        qit, st = (r.stored(b) for b in built)
        target = Target(st, [GROUP_ID], r.sensitive[0].name, COUNT)
        model = r.models[0]

        def diverse(conn: psycopg.Connection) -> CheckResult:
            # ST is stored in group order: grouping it by a sort (nearly free on sorted rows)
            # beats hashing one entry per group, 0.8 s against 1.9 s at 1M rows.
            with local_settings(conn, enable_hashagg="off"):
                return model.check(conn, target)

        def consistent(conn: psycopg.Connection) -> CheckResult:
            # raises ModelViolation when not; the diversity is the model check's (above)
            seen = verify_anatomy(conn, qit, st, self._l(r), diverse=False)
            figures = {"rows": seen.rows, "classes": seen.groups, "min_class_size": seen.smallest,
                       "max_class_size": seen.largest}  # fmt: skip
            return CheckResult("Anatomy QIT/ST consistency", True, figures)

        return [Check(model.name, diverse), Check("Anatomy QIT/ST", consistent)]

    def figures(
        self, conn: psycopg.Connection, r: Resolved, built: list[Built], checked: dict[str, Any]
    ) -> dict[str, Any]:
        """Groups of the QIT are its classes: what an adversary can narrow a person down to.
        The consistency check counted every group's QIT rows (and found the ST agreeing), so
        its figures are these; without them, counted on the ST (a row per group and value,
        with its count), much smaller than the QIT."""
        from dbanon.setlogic.anatomy import COUNT, GROUP_ID

        figures = ("rows", "classes", "min_class_size", "max_class_size")
        if all(f in checked for f in figures):
            return {f: checked[f] for f in figures}
        return class_sizes(conn, r.stored(built[1]), [sql.Identifier(GROUP_ID)],
                           sql.Identifier(COUNT))  # fmt: skip


register(Anatomy())
