"""A privacy budget per source, and the ledger of what differentially private runs spent.

`dp_budget`: the ε (and optionally δ) a DBA allows all differentially private releases of one
source together (`dbanon budget SOURCE --epsilon E`). `dp_spend`: one row per run of such a
release that succeeded, with the ε and δ it spent, kept when the release is dropped (a consumer
keeps what it read) and when the budget is changed. Sequential composition: what a source has
spent is the sum of its rows (docs/methods/safepub.md).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""
        CREATE TABLE dbanon.dp_budget (
            source_schema text NOT NULL,
            source_name text NOT NULL,
            epsilon float8 NOT NULL CHECK (epsilon > 0 AND epsilon < 'Infinity'),
            delta float8 CHECK (delta > 0 AND delta < 1),
            set_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (source_schema, source_name)
        )""")
    op.execute("""
        CREATE TABLE dbanon.dp_spend (
            id bigserial PRIMARY KEY,
            source_schema text NOT NULL,
            source_name text NOT NULL,
            release text NOT NULL,
            run_id bigint,
            epsilon float8 NOT NULL,
            delta float8 NOT NULL,
            spent_at timestamptz NOT NULL DEFAULT now()
        )""")
    op.execute("CREATE INDEX dp_spend_source ON dbanon.dp_spend (source_schema, source_name)")


def downgrade() -> None:
    op.execute("DROP TABLE dbanon.dp_spend")
    op.execute("DROP TABLE dbanon.dp_budget")
