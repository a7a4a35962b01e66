"""`dbanon check NAME --release` for every shape a registered method can release.

tests/test_recheck.py checks each method as the gate publishes it (and that a broken release is
found out). Here every choice of every method's own choice option (a table or a live view,
text or typed ranges, one-hot features, a LAG variant, ...) is published from the registry, and
`check NAME --release` must exit 0 with every model it names holding, in JSON and for people,
leaving nothing behind; and again after the source changed (a live view reads it afresh; a
perturbed release is checked against its source rows as they are, so only before).
A choice that only matters at refresh (the refresh policy) releases the same shape: skipped.
"""

from __future__ import annotations

import psycopg
import pytest
from helpers import cli, cli_json
from test_gate import OWN_CHECKS, publish_args, ward  # noqa: F401 - ward is a fixture
from test_recheck import recheck_cases

from dbanon.methods import methods

SAME_SHAPE = {"refresh_policy"}  # options that change nothing a first publish releases


def variants() -> list[object]:
    """(method, publish arguments) for each non-default choice of each method's options."""
    base = {p.values[0]: p.values[1] for p in recheck_cases()}  # type: ignore[attr-defined]
    out = []
    for name, method in methods().items():
        for o in method.all_options():
            if o.name in SAME_SHAPE:
                continue
            for choice in o.choices:
                if choice == o.default:
                    continue
                args = [a for a in base[name]]
                if o.flag in args:  # the gate's own choice of it (e.g. --as table): replaced
                    i = args.index(o.flag)
                    del args[i : i + 2]
                ident = f"{name}-{o.name}-{choice}"
                out.append(pytest.param(name, (*args, o.flag, choice), id=ident))
    return out


def check(dsn: str) -> dict:
    code, checked = cli_json(dsn, "check", "r", "--release")
    assert code == 0 and checked["holds"], checked
    assert checked["models"] and all(m["holds"] for m in checked["models"]), checked
    human = cli(dsn, "check", "r", "--release")
    assert human.exit_code == 0 and "\tholds\tno" not in human.stdout, human.stdout
    assert human.stdout.count("\tholds\tyes") == len(checked["models"]), human.stdout
    return checked


@pytest.mark.parametrize(("method", "args"), variants())
def test_check_release_for_every_choice(
    conn: psycopg.Connection, dsn: str, ward: list[tuple], method: str,  # noqa: F811
    args: tuple[str, ...],
) -> None:  # fmt: skip
    publish = publish_args(method, "r", args)
    if method in OWN_CHECKS:  # perturbing methods: numeric columns, as test_gate publishes them
        publish[publish.index("--qi") + 1] = "age,severity"
    code, out = cli_json(dsn, *publish)
    assert code == 0, out
    first = check(dsn)
    assert conn.execute(
        "SELECT count(*) FROM pg_class c WHERE relname LIKE 'dbanon\\_%%' "
        "AND relnamespace <> 'dbanon'::regnamespace AND NOT EXISTS ("  # but the release's own
        "  SELECT FROM pg_depend d JOIN pg_rewrite rw ON rw.oid = d.objid "
        "  WHERE d.classid = 'pg_rewrite'::regclass AND d.refobjid = c.oid "
        "  AND rw.ev_class IN "
        "  (SELECT oid FROM pg_class WHERE relnamespace = 'released'::regnamespace))"
    ).fetchone()[0] == 0, "a check left a relation behind"
    if method in OWN_CHECKS:  # perturbed values are checked against their source rows as they
        return  # are now: a changed source is not this release's (refresh it)
    # The source changes under the release (a live view shows it at once): still checkable.
    conn.execute("UPDATE h.ward SET age = age + 1 WHERE id % 7 = 0")
    again = check(dsn)
    assert [m["model"] for m in again["models"]] == [m["model"] for m in first["models"]]
