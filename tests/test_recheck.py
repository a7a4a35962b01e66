"""`dbanon check NAME --release` for every registered method, generated from the registry.

For each method (and a full-domain live view), a release is published as the gate tests publish
it (tests/test_gate.py CASES), then `check NAME --release` must run the checks the publish ran and
find they hold; then the relation the promises are checked on is cut to one row (a view
redefined to show one row), and the same command must find a check that fails.
A method registered without an entry in test_gate.CASES fails here too. The same releases show
(`dbanon show NAME`) as `publish` arguments that store the same spec again.
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
        "('dbanon_view_snapshot', 'dbanon_noise_pairs')"
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


def test_show_round_trips_every_method_and_model(
    ward: list, dsn: str  # noqa: F811
) -> None:
    """For every variant of every registered method in the gate's CASES (every model kind and
    its parameters): the arguments `show` prints store the same spec again."""
    variants = [(m, a) for m, case in CASES.items() for vs in case.promises.values() for a in vs]
    variants += [(m, a) for m, a in OWN_CHECKS.items()]
    seen = set()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i, (method, args) in enumerate(variants):
            if (method, args) in seen:
                continue
            seen.add((method, args))
            publish = publish_args(method, f"s{i}", args)
            if method in OWN_CHECKS:
                publish[publish.index("--qi") + 1] = "age,severity"
            code, out = cli_json(dsn, *publish)
            assert code == 0, (method, args, out)
            code, shown = cli_json(dsn, "show", f"s{i}")
            again = shown["publish"]
            again[1] = f"c{i}"
            code, out = cli_json(dsn, *again)
            assert code == 0, (method, again, out)
            specs = dict(conn.execute(
                "SELECT name, spec FROM dbanon.release WHERE name IN (%s, %s)", [f"s{i}", f"c{i}"]
            ).fetchall())  # fmt: skip
            first, second = ({k: v for k, v in s.items() if k != "name"} for s in specs.values())
            assert first == second, (method, args, again)
