"""The chapters 4-5 occupation stand-in embeds no published QI (issue 35 item 5): an attacker
who filters each bucket by the target's known QIs (tests/attack_embedded.py, no dbanon code)
finds nobody above 1/l. The same attacker against the old occupation x education stand-in
finds many, so the check can fail."""

from __future__ import annotations

import numpy as np
import psycopg
from attack_embedded import attack

from dbanon.core.flags import draw
from dbanon.experiments import localanatomy as la

ROWS, ELL, DENSITY = 4000, 12, 0.2


def _attacked(dsn: str, occupation: str) -> tuple[object, int]:
    data = la.load(ROWS, [*la.QI, *la.SEMI], 0, occupation)
    flags = draw(data.n, la.SEMI, DENSITY, 0)
    with psycopg.connect(dsn) as conn:
        source = la.load_source(conn, data)
        rel = la.load_flags(conn, source, flags, f"standin_{occupation}")
        pub = la.publish_la(conn, source, rel, data, flags, ELL, True, 0)
        assert "occupation" in pub.used  # released under l = ELL, not left out
        got = attack(conn, tuple(source.split(".")), la.KEY, tuple(rel.split(".")),
                     (la.TARGET, "exp_la"), "occupation", la.QI, la.SEMI, ELL)  # fmt: skip
    return got, int(np.count_nonzero(flags["occupation"]))


def test_default_stand_in_keeps_every_flagged_person_within_1_over_l(dsn: str) -> None:
    got, flagged = _attacked(dsn, "unpublished")
    assert got.targets == flagged > 0
    assert got.above == []
    assert got.disclosed == 0


def test_education_stand_in_leaks_to_the_same_attacker(dsn: str) -> None:
    got, flagged = _attacked(dsn, "education")
    assert got.targets == flagged > 0
    assert len(got.above) > flagged // 4
    assert got.mean > 2 / ELL
