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

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# A frozen copy of the definition revision 0001 installs (its HIERARCHY).
GENERALIZE = """
CREATE FUNCTION dbanon.generalize(hierarchy text, val text, lvl integer)
RETURNS text LANGUAGE sql STABLE STRICT PARALLEL SAFE AS $$
    SELECT m.label
    FROM dbanon.hierarchy_map m JOIN dbanon.hierarchy h ON h.id = m.hierarchy_id
    WHERE h.name = hierarchy AND m.value = val AND m.level = lvl
$$;

COMMENT ON FUNCTION dbanon.generalize(text, text, integer) IS
    'Label of a leaf value at a hierarchy level (0 = the value itself); NULL when not a leaf.';
"""


def upgrade() -> None:
    op.execute("DROP FUNCTION dbanon.generalize(text, text, integer)")


def downgrade() -> None:
    op.execute(GENERALIZE)
