"""Drop the SQL function dbanon.generalize(): nothing uses it.

Releases generalise categorical QIs with dbanon.lca() (k-member, Mondrian) or by joining
dbanon.hierarchy_map (full-domain); generalize() was never called, so it was untested surface
in every database. The downgrade recreates it exactly as revision 0001 made it.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22
"""

from __future__ import annotations

from alembic import op
from dbanon.sql import read

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("DROP FUNCTION dbanon.generalize(text, text, integer)")


def downgrade() -> None:
    op.execute(read("0001_generalize.sql"))  # as revision 0001 installed it
