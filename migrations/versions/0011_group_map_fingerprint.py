"""Each map row remembers what the release showed of it: its released columns' fingerprint and
the values its group showed.

A refresh under the `sealed` policy (dbanon.algorithms.sealed) keeps a group only when every row
it released is still in the source and unchanged, so that two releases differ by whole groups
and a diff never isolates one joiner, leaver or update. "Unchanged" is `fp`: md5 of the row's
QI, sensitive and kept columns as the run read them. `shown`: the tagged sensitive values of the
row's group as released (with repeats), which a retired group's remaining rows carry while they
wait, so that they come back only where a diff cannot tell the missing rows' values. Rows
mapped before this revision have neither and count as changed: their groups are formed afresh
once, under the intersection guard.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def _each_map(statement: str) -> str:
    return f"""
        DO $$
        DECLARE t text;
        BEGIN
            FOR t IN SELECT c.relname FROM pg_class c
                     JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE n.nspname = 'dbanon' AND c.relkind = 'r'
                       AND c.relname ~ '^group_map_[0-9]+$' LOOP
                EXECUTE format('{statement}', t);
            END LOOP;
        END $$;"""


def upgrade() -> None:
    op.execute(_each_map("ALTER TABLE dbanon.%I ADD COLUMN IF NOT EXISTS fp text"))
    op.execute(_each_map("ALTER TABLE dbanon.%I ADD COLUMN IF NOT EXISTS shown text[]"))


def downgrade() -> None:
    op.execute(_each_map("ALTER TABLE dbanon.%I DROP COLUMN IF EXISTS shown"))
    op.execute(_each_map("ALTER TABLE dbanon.%I DROP COLUMN IF EXISTS fp"))
