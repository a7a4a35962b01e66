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


def run() -> None:
    dsn = _dsn()  # any libpq form (URL or key=value): psycopg connects, SQLAlchemy wraps it
    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn))
    with engine.connect() as conn:
        conn.execute(text(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}"))  # constant identifier
        context.configure(connection=conn, version_table_schema=SCHEMA, transactional_ddl=True)
        with context.begin_transaction():
            context.run_migrations()
            if context.get_context().get_current_revision() is None:
                conn.execute(text(f"DROP TABLE IF EXISTS {SCHEMA}.alembic_version"))
                conn.execute(text(f"DROP SCHEMA IF EXISTS {SCHEMA}"))
        conn.commit()
    engine.dispose()


run()
