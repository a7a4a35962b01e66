"""`python -m dbanon` is the `dbanon` command."""

from dbanon.cli import run

run()
