"""The private state of each noise release: its secret and reference points, its row map.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE dbanon.noise_state (
            release_id integer PRIMARY KEY REFERENCES dbanon.release ON DELETE CASCADE,
            secret bytea NOT NULL,
            state jsonb NOT NULL
        );
        COMMENT ON TABLE dbanon.noise_state IS
            'Private: the secret of the keyed noise of a perturbation release (ina, noise) and '
            'what a refresh reuses with it (normalisation, reference points). Never granted: '
            'with it the noise of every row can be recomputed and removed.';
        CREATE TABLE dbanon.noise_map (
            release_id integer NOT NULL REFERENCES dbanon.release ON DELETE CASCADE,
            row_id bigint NOT NULL,
            key text NOT NULL,
            PRIMARY KEY (release_id, row_id)
        );
        COMMENT ON TABLE dbanon.noise_map IS
            'Private: the source key of each row of a perturbation release (its dbanon_row), '
            'for `dbanon compare`. Never granted: it links released rows back to source keys.';
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE dbanon.noise_map; DROP TABLE dbanon.noise_state")
