"""What every command shares: the consoles (TSV off a terminal), the JSON-anywhere
group, one-line errors, the list parsers.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import wraps
from typing import TYPE_CHECKING, Any

import click
import psycopg

from dbanon.core.hierarchy import HierarchyError
from dbanon.db import catalog
from dbanon.errors import DbanonError, first_line

if TYPE_CHECKING:
    from dbanon.api import Database


class _Console:
    """rich's Console, made on first use: start-up imports only what a command needs (a
    command that prints no table or spinner never imports rich). Not on a terminal (a pipe, a
    file), nothing is wrapped and tables print as tab-separated lines: a script or a paste gets
    whole lines, never cells cut to fit 80 columns."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
            if not self._console.is_terminal:
                self._console.soft_wrap = True
        return getattr(self._console, name)

    def print(self, obj: Any, *args: Any, **kwargs: Any) -> None:  # noqa: A003
        if isinstance(obj, PlainTable):
            click.echo(obj.text(), err=self._options.get("stderr", False))
        else:
            self.__getattr__("print")(obj, *args, **kwargs)


class PlainTable:
    """A table for a pipe: a header line (unless none) and one tab-separated line per row."""

    def __init__(self, *columns: str, show_header: bool = True, **_ignored: Any) -> None:
        self.header = list(columns) if show_header and columns else None
        self.rows: list[tuple[str, ...]] = []

    def add_row(self, *cells: Any) -> None:
        self.rows.append(tuple(" ".join(str(c).split()) for c in cells))

    def text(self) -> str:
        lines = ([self.header] if self.header else []) + self.rows
        return "\n".join("\t".join(line) for line in lines)


def Table(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 - stands in for rich's class
    if not out.is_terminal:
        return PlainTable(*args, **kwargs)
    from rich.table import Table as RichTable

    return RichTable(*args, **kwargs)


def cells(*values: Any) -> tuple[Any, ...]:
    """A table row's cells as they read: on a terminal rich Text (no markup: a released value
    such as `[30,39]` or a name in brackets is printed as it is), piped plain text."""
    texts = tuple("-" if v is None else str(v) for v in values)
    if not out.is_terminal:
        return texts
    from rich.text import Text

    return tuple(Text(t) for t in texts)


err = _Console(stderr=True)


out = _Console()


class Ctx:
    def __init__(self, dsn: str | None, as_json: bool) -> None:
        self.dsn = dsn
        self.json = as_json

    def db(self) -> Database:
        from dbanon.api import Database  # the library, loaded by the commands that use it

        return Database(self.dsn)

    def emit(self, data: dict[str, Any], human: Callable[[], None]) -> None:
        if self.json:
            click.echo(json.dumps(data, default=str))
        else:
            human()

    @contextmanager
    def progress(self) -> Iterator[Callable[[str], None]]:
        """Stage messages on stderr while long work runs (silent with --json or no tty)."""
        if self.json or not err.is_terminal:
            yield lambda _msg: None
            return
        with err.status("starting") as status:
            yield lambda msg: status.update(msg)


def _error(
    message: str, code: int, prefix: str = "error: ", details: dict[str, Any] | None = None
) -> None:
    """An error: one line on stderr, or with --json one JSON object on stdout (with the
    error's `details`, e.g. what an apply did before it stopped); then exit."""
    ctx = click.get_current_context(silent=True)
    c = ctx.find_object(Ctx) if ctx else None
    if c is not None and c.json:
        click.echo(json.dumps({"error": message, "exit": code, **(details or {})}, default=str))
    else:
        click.echo(f"{prefix}{message}", err=True)
    sys.exit(code)


def fails_cleanly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn user-facing errors into one line (or one JSON object) and exit code 2."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (DbanonError, HierarchyError) as e:
            _error(str(e), getattr(e, "exit_code", 2), details=getattr(e, "details", None))
        except psycopg.Error as e:
            _error(f"PostgreSQL: {first_line(e)}", 2)

    return wrapper


def _json_anywhere(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        c = ctx.find_object(Ctx)
        if c is not None:
            c.json = True


class Command(click.Command):
    """Every command takes --json after its name too (`dbanon check --json ...`); its usage
    errors are one line (UsageLine)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:  # noqa: D102
        return _usage_in_one_line(lambda: super(Command, self).parse_args(ctx, args))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.append(
            click.Option(
                ["--json"], is_flag=True, expose_value=False, is_eager=True,
                callback=_json_anywhere, help="Print one JSON object.",
            )
        )  # fmt: skip


class UsageLine(click.ClickException):
    """A usage error (a bad option value, an unknown command) as one line on stderr, like every
    other error, with where help is: click prints four (usage, hint, blank, error), which a
    script or a log then has to take apart. PostgreSQL's tools print `error: ...` too."""

    exit_code = 2

    def __init__(self, e: click.UsageError) -> None:
        where = f"; see '{e.ctx.command_path} --help'" if e.ctx is not None else ""
        super().__init__(e.format_message().rstrip(".") + where)

    def show(self, file: Any = None) -> None:  # noqa: D102
        click.echo(f"error: {self.format_message()}", err=True)


def _usage_in_one_line(run: Callable[[], Any]) -> Any:
    try:
        return run()
    except click.exceptions.NoArgsIsHelpError:  # `dbanon` alone: its help, as asked
        raise
    except click.UsageError as e:
        raise UsageLine(e) from None


class Group(click.Group):
    """Subcommands are `Command`s; with --json anywhere, usage errors are JSON too; usage
    errors are one line (UsageLine)."""

    command_class = Command

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:  # noqa: D102
        return _usage_in_one_line(lambda: super(Group, self).parse_args(ctx, args))

    def invoke(self, ctx: click.Context) -> Any:  # noqa: D102
        if ctx.parent is not None:
            return _usage_in_one_line(lambda: super(Group, self).invoke(ctx))
        return interruptible(lambda: _usage_in_one_line(lambda: super(Group, self).invoke(ctx)))

    def main(self, args: Any = None, **extra: Any) -> Any:  # noqa: D102
        argv = list(sys.argv[1:] if args is None else args)
        if "--json" not in argv:
            return super().main(argv, **extra)
        extra.pop("standalone_mode", None)
        try:
            return super().main(argv, standalone_mode=False, **extra)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except click.ClickException as e:
            click.echo(json.dumps({"error": e.format_message(), "exit": e.exit_code}))
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo(json.dumps({"error": "aborted", "exit": 1}))
            sys.exit(1)


Group.group_class = Group


def interruptible(run: Callable[[], Any]) -> Any:
    """Run a command under dbanon's SIGINT/SIGTERM handlers (dbanon.lifecycle.interrupts): after a
    signal, whatever the command ended with, print one line and exit 130 (SIGINT) or 143."""
    from dbanon.lifecycle import interrupts

    interrupts.reset()
    with interrupts.handled():
        try:
            result = run()
        except BaseException:
            if interrupts.message() is None:
                raise
            result = None
        said = interrupts.message()
        if said is not None:
            text, code = said
            _error(text, code, prefix="")
    return result


class Seconds(click.FloatRange):
    """Seconds, at least 0 and finite: nan passes every comparison, and inf never ends a wait."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return rv


def qi_list(_ctx: click.Context, _param: click.Parameter, value: str | None) -> list[str]:
    try:
        return catalog.parse_list(value) if value else []
    except DbanonError as e:
        raise click.BadParameter(str(e)) from None


def pairs(items: tuple[str, ...], flag: str) -> dict[str, str]:
    """COLUMN=HIERARCHY options into a mapping (split at the last '=')."""
    out: dict[str, str] = {}
    for item in items:
        column, eq, name = item.rpartition("=")
        if not eq or not column or not name:
            raise DbanonError(f"{flag} takes COLUMN=HIERARCHY, got {item!r}")
        out[column] = name
    return out


def _timestamp(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not an ISO time such as 2026-11-22T03:00") from None


class DefaultGroup(Group):
    """`dbanon schedule NAME --every ...` is `dbanon schedule set NAME --every ...`."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["set", *args]
        return super().resolve_command(ctx, args)


def command(*args: Any, **kwargs: Any) -> Any:
    """`click.command` making a `Command` (it takes --json after its name too)."""
    kwargs.setdefault("cls", Command)
    return click.command(*args, **kwargs)


def group(*args: Any, **kwargs: Any) -> Any:
    """`click.group` making a `Group`."""
    kwargs.setdefault("cls", Group)
    return click.group(*args, **kwargs)
