"""The generated blocks of README.md and docs/: a registry of block names and renderers (blocks),
the renderers over the registries and CLI (generate) and over committed JSON and CSV (figures).
`dbanon docs` rewrites them, `dbanon docs --check` (and a test) fails when one is stale.

May import anything; nothing but the CLI imports it."""
