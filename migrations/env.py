"""Alembic environment: the catalog lives in schema `dbanon`, its version table too.

The URL comes from the Alembic config (set by `dbanon init`) or, for the plain `alembic` command,
from DBANON_DSN / the embedded server. After a downgrade to base the schema is dropped, so the
database is left as it was before `dbanon init`.
"""

import psycopg
from alembic import context
from sqlalchemy import create_engine, text

SCHEMA = "dbanon"


def _dsn() -> str:
    dsn = context.config.get_main_option("sqlalchemy.url")
    if not dsn:
        from dbanon.db.connection import resolve_dsn

        dsn = resolve_dsn()
    return dsn


def _refuse_base_with_releases(conn) -> None:  # noqa: ANN001 - a SQLAlchemy connection
    """Down to base drops the catalog, and with it the only record of the released relations:
    refuse while releases exist (`dbanon uninstall` drops them first, then the catalog)."""
    from alembic.util import CommandError

    if context.get_revision_argument() is not None:  # not a downgrade to base
        return
    if conn.execute(text("SELECT to_regclass('dbanon.release')")).scalar() is None:
        return
    names = conn.execute(text("SELECT name FROM dbanon.release ORDER BY name")).scalars().all()
    if names:
        shown = ", ".join(repr(n) for n in names[:5]) + (" ..." if len(names) > 5 else "")
        raise CommandError(
            f"{len(names)} release(s) exist ({shown}): `dbanon uninstall` drops them and then "
            "the catalog; `alembic downgrade base` would leave their relations behind"
        )


def run() -> None:
    dsn = _dsn()  # any libpq form (URL or key=value): psycopg connects, SQLAlchemy wraps it
    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn))
    with engine.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}"))  # constant identifier
        context.configure(connection=conn, version_table_schema=SCHEMA, transactional_ddl=True)
        _refuse_base_with_releases(conn)
        with context.begin_transaction():
            context.run_migrations()
            if context.get_context().get_current_revision() is None:
                conn.execute(text(f"DROP TABLE IF EXISTS {SCHEMA}.alembic_version"))
                conn.execute(text(f"DROP SCHEMA IF EXISTS {SCHEMA}"))
        conn.commit()
    engine.dispose()


run()
