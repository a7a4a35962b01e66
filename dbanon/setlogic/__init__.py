"""Anonymisation done entirely as set logic in PostgreSQL: GROUP BY, joins and window functions.

Where an algorithm's every step is a relational operation there is no reason to stream rows out:
the database groups, counts and generalises faster than Python could, and a release can then be
a live VIEW whose generalisation and suppression are SQL expressions over the source.

Modules (imported by their own names, so that one cannot break another's import):
- `dbanon.setlogic.hierarchies` — full-domain generalisation's hierarchies per QI as SQL (stored,
  automatic numeric intervals, calendar periods, flat), each level's value and loss;
- `dbanon.setlogic.lattice` — its optimal lattice search over GROUP BY counts (`coded`: the
  same counts in numpy for a k-only search);
- `dbanon.setlogic.fulldomain` — the generalising, suppressing SELECT a release table or live
  view is made of (its benchmark on Adult is dbanon.bench.fulldomain);
- `dbanon.setlogic.anatomy` — Anatomy for l-diversity: eligibility and checks as SQL, the
  deal (`row_number() OVER (ORDER BY sa, random())` modulo the groups) over COPY-streamed rows;
- `dbanon.setlogic.composition` — the private row-to-group map of a release and what
  intersecting its releases leaves each persisting row (the lifecycle's intersection guard;
  the methods that keep groups read the map too).

May import: dbanon.errors, dbanon.db, dbanon.core, dbanon.models, dbanon.algorithms.
"""
