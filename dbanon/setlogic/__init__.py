"""Anonymisation done entirely as set logic in PostgreSQL: GROUP BY, joins and window functions.

Where an algorithm's every step is a relational operation there is no reason to stream rows out:
the database groups, counts and generalises faster than Python could, and a release can then be
a live VIEW whose generalisation and suppression are SQL expressions over the source.

Modules (imported by their own names, so that one cannot break another's import):
- `dbanon.setlogic.fulldomain` — full-domain generalisation: an optimal lattice search over
  GROUP BY counts, and the generalising, suppressing SELECT a release table or view is made of;
- `dbanon.setlogic.anatomy` — Anatomy for l-diversity: bucket ids from one window function.
"""
