"""The shared vocabulary below the methods and the lifecycle: the release spec (what a DBA
declares, stored as JSON), value hierarchies, generalisation of values to ranges and labels,
and the flags table of personalised privacy.

May import: dbanon.errors and dbanon.db (whose catalog stores hierarchies: dbanon.db.catalog
imports core.hierarchy, which imports nothing of dbanon). Nothing above."""
