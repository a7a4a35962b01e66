"""`dbanon check NAME --release` for every registered method, generated from the registry.

For each method (and a full-domain live view), a release is published as the gate tests publish
it (tests/test_gate.py CASES), then `check NAME --release` must run the checks the publish ran and
find they hold; then the relation the promises are checked on is cut to one row (a view
redefined to show one row), and the same command must find a check that fails.
A method registered without an entry in test_gate.CASES fails here too.
"""

from __future__ import annotations

import psycopg
import pytest
from helpers import cli_json
from psycopg import sql
from test_gate import CASES, OWN_CHECKS, publish_args, ward  # noqa: F401 - ward is a fixture

from dbanon.methods import methods


def recheck_cases() -> list[object]:
    out = []
    for name in methods():
        case = CASES.get(name)
        if name in OWN_CHECKS:
            args: tuple[str, ...] | None = OWN_CHECKS[name]
        elif case is not None and case.promises:
            args = next(iter(case.promises.values()))[0]
        else:
            args = None
        out.append(pytest.param(name, args, id=name))
        if name == "fulldomain":
            out.append(pytest.param(name, ("--k", "4", "--as", "view"), id="fulldomain-view"))
    return out


@pytest.mark.parametrize(("method", "args"), recheck_cases())
def test_check_release_works_for_every_method(
    conn: psycopg.Connection, dsn: str, ward: list[tuple], method: str,  # noqa: F811
    args: tuple[str, ...] | None,
) -> None:  # fmt: skip
    assert args is not None, f"method {method} has no publish arguments in test_gate.CASES"
    publish = publish_args(method, "r", args)
    if method in OWN_CHECKS:  # perturbing methods: numeric columns, as test_gate publishes them
        publish[publish.index("--qi") + 1] = "age,severity"
    code, out = cli_json(dsn, *publish)
    assert code == 0, out
    code, checked = cli_json(dsn, "check", "r", "--release")
    assert code == 0 and checked["holds"], checked
    assert checked["models"], "a release is checked by at least one check"
    # nothing of the check is left behind (its temp relations went with its transaction)
    assert conn.execute(
        "SELECT count(*) FROM pg_class WHERE relname IN "
        "('dbanon_view_snapshot', 'dbanon_noise_stage')"
    ).fetchone()[0] == 0

    obj = CASES[method].obj if method in CASES else 0
    schema, name = out["objects"][obj].split(".")
    kind = conn.execute(
        "SELECT c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s",
        [schema, name],
    ).fetchone()[0]
    target = sql.Identifier(schema, name)
    if kind == "v":  # a live view keeps its promise whatever the source: redefined to one row
        body = conn.execute(
            "SELECT pg_get_viewdef(%s::regclass)", [target.as_string(conn)]
        ).fetchone()[0].rstrip().rstrip(";")
        conn.execute(
            sql.SQL("CREATE OR REPLACE VIEW {} AS SELECT * FROM ({}) v LIMIT 1").format(
                target, sql.SQL(body)  # the server's own text of the view
            )
        )
    else:
        conn.execute(
            sql.SQL("DELETE FROM {t} WHERE ctid <> (SELECT min(ctid) FROM {t})").format(t=target)
        )
    conn.commit()
    code, checked = cli_json(dsn, "check", "r", "--release")
    assert code == 1 and not checked["holds"], checked
