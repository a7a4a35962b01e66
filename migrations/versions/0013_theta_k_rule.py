"""(θ,k) releases published before the paper's condition became the default keep their promise.

Until this revision a (θ,k) release promised the relaxed condition (each category's values
capped by what the relation's classes could hold) under the name (θ,k)-anonymity; the default is
now the paper's min(⌊k/θ⌋, V_c). A stored model without a `rule` would read as the paper's and
the next refresh would rebuild the release under a stricter promise than it was verified with,
or be refused by the intersection guard. So each stored (θ,k) model without a rule is marked
`relaxed`: what it was built and verified for, now said by name (`report`, `show`). A DBA moves
it to the paper's condition with `publish --replace --theta-rule paper`. The downgrade removes
the marks this revision set (relaxed was the only rule before it).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

MARK = """
    UPDATE dbanon.release r SET spec = jsonb_set(r.spec, '{models}', (
        SELECT jsonb_agg(CASE WHEN m ->> 'name' = 'theta-k-anonymity' AND COND
                              THEN CHANGE ELSE m END ORDER BY i)
        FROM jsonb_array_elements(r.spec -> 'models') WITH ORDINALITY AS e(m, i)))
    WHERE EXISTS (SELECT FROM jsonb_array_elements(r.spec -> 'models') m
                  WHERE m ->> 'name' = 'theta-k-anonymity' AND COND)
"""


def upgrade() -> None:
    op.execute(MARK.replace("COND", "NOT m ? 'rule'").replace(
        "CHANGE", "m || '{\"rule\": \"relaxed\"}'::jsonb"))  # fmt: skip


def downgrade() -> None:
    op.execute(MARK.replace("COND", "m ->> 'rule' = 'relaxed'").replace("CHANGE", "m - 'rule'"))
