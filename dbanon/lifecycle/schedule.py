"""Scheduled refresh: when each release is due, and `refresh --due` for cron or a systemd timer.

A schedule is `every` (a PostgreSQL interval: '6 hours') or `cron` (a cron expression, read by
croniter), stored in dbanon.schedule. A release is due when it never ran, or when the next time
after its latest succeeded or skipped run has come. A due release whose source is unchanged
since its latest success (same fingerprint) is not rebuilt: its run is recorded `skipped`,
unless forced. The scheduler itself is the system's (cron, a systemd timer, pg_cron running a
shell): `install` writes the lines that call `dbanon refresh --due` every few minutes.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import platformdirs
import psycopg

from dbanon.db import catalog, server
from dbanon.db.connection import LIBPQ_SERVER_VARIABLES
from dbanon.errors import DbanonError, first_line, quote_name
from dbanon.lifecycle import diffexposure, hierarchy_pins, runs
from dbanon.lifecycle.catalogue import load_spec
from dbanon.lifecycle.publish import Refused, Unchanged
from dbanon.lifecycle.refresh import refresh
from dbanon.lifecycle.resolve import Progress, fingerprint

CHECK_EVERY_MINUTES = 5  # how often the installed timer asks which releases are due
# The exit code of `refresh --due` for each outcome that needs the DBA, worst first: a failure
# (the run could not even be judged: something needs repair) before a refusal (the previous
# release is kept until the DBA chooses). A busy release is the next tick's business: exit 0.
EXIT_CODES = {"failed": 2, "refused": 4}


def _release_id(conn: psycopg.Connection, name: str) -> int:
    catalog.require_catalog(conn)
    row = conn.execute("SELECT id FROM dbanon.release WHERE name = %s", [name]).fetchone()
    if row is None:
        raise DbanonError(f"release {quote_name(name)} does not exist (see `dbanon releases`)")
    return row[0]


def check(conn: psycopg.Connection, *, every: str | None = None, cron: str | None = None) -> None:
    """One of a positive interval or a cron expression (refused: one line naming it)."""
    if (every is None) == (cron is None):
        raise DbanonError("give one of --every INTERVAL or --cron EXPRESSION")
    if cron is not None:
        from croniter import croniter

        if not croniter.is_valid(cron):
            raise DbanonError(f"--cron {cron!r} is not a cron expression (e.g. '0 3 * * *')")
        return
    try:
        with conn.transaction():
            positive = conn.execute("SELECT %s::interval > interval '0'", [every]).fetchone()[0]
    except psycopg.errors.DataError:
        raise DbanonError(f"--every {every!r} is not an interval (e.g. '6 hours')") from None
    if not positive:
        raise DbanonError(f"--every {every!r} must be a positive interval")


def set_schedule(
    conn: psycopg.Connection, name: str, *, every: str | None = None, cron: str | None = None
) -> dict[str, Any]:
    """Schedule a release (replacing its schedule), in the caller's transaction."""
    if (every is None) == (cron is None):
        raise DbanonError("give one of --every INTERVAL or --cron EXPRESSION")
    rid = _release_id(conn, name)
    check(conn, every=every, cron=cron)
    conn.execute(
        """INSERT INTO dbanon.schedule (release_id, every, cron) VALUES (%s, %s::interval, %s)
           ON CONFLICT (release_id) DO UPDATE SET every = EXCLUDED.every, cron = EXCLUDED.cron""",
        [rid, every, cron],
    )
    return {"release": name, "every": every, "cron": cron}


# An interval's fields, largest first, as PostgreSQL reads them back ('1 year 2 months 6 hours').
_INTERVAL_FIELDS = ("year", "month", "day", "hour", "minute", "second")


def interval_text(fields: tuple[Any, ...]) -> str:
    """An interval as words PostgreSQL reads back to the same interval ('6 hours', not the
    '6:00:00' of a Python timedelta, which also loses months): from its extracted fields."""
    words = []
    for unit, value in zip(_INTERVAL_FIELDS, fields, strict=True):
        if value:
            number = format(value.normalize(), "f") if hasattr(value, "normalize") else str(value)
            words.append(f"{number} {unit}{'' if value == 1 else 's'}")
    return " ".join(words) or "0 seconds"


def clear_schedule(conn: psycopg.Connection, name: str) -> bool:
    rid = _release_id(conn, name)
    return conn.execute("DELETE FROM dbanon.schedule WHERE release_id = %s", [rid]).rowcount > 0


def _next_due(every: Any, cron: str | None, last: datetime | None) -> datetime | None:
    """When a release is next due: None if it never ran (due at once)."""
    if last is None:
        return None
    if cron is not None:
        from croniter import croniter

        return croniter(cron, last).get_next(datetime)
    return last + every


def schedules(conn: psycopg.Connection, now: datetime | None = None) -> list[dict[str, Any]]:
    """Every scheduled release with its latest run and when it is next due."""
    catalog.require_catalog(conn)
    now = now or datetime.now(timezone.utc)
    rows = conn.execute(
        """SELECT r.name, s.every, s.cron, extract(year FROM s.every)::int,
                  extract(month FROM s.every)::int, extract(day FROM s.every)::int,
                  extract(hour FROM s.every)::int, extract(minute FROM s.every)::int,
                  extract(second FROM s.every),
                  (SELECT max(u.started_at) FROM dbanon.run u WHERE u.release_id = r.id
                     AND u.status IN ('succeeded', 'skipped'))
           FROM dbanon.schedule s JOIN dbanon.release r ON r.id = s.release_id
           ORDER BY r.name"""
    ).fetchall()
    out = []
    for name, every, cron, *parts, last in rows:
        nxt = _next_due(every, cron, last)
        out.append(
            {
                "release": name,
                "every": interval_text(tuple(parts)) if every is not None else None,
                "cron": cron,
                "last_run_at": last.isoformat() if last else None,
                "next_due_at": nxt.isoformat() if nxt else None,
                "due": nxt is None or nxt <= now,
            }
        )
    return out


def _unchanged(conn: psycopg.Connection, name: str) -> str | None:
    """The source's fingerprint if it equals the one of the release's latest success."""
    spec = load_spec(conn, name)
    last = conn.execute(
        """SELECT u.source_fingerprint FROM dbanon.run u JOIN dbanon.release r
               ON r.id = u.release_id
           WHERE r.name = %s AND u.status = 'succeeded' ORDER BY u.started_at DESC LIMIT 1""",
        [name],
    ).fetchone()
    source = catalog.find_relation(conn, spec.source)
    if last is None or source is None or hierarchy_pins.stale(conn, name):
        return None  # (a hierarchy replaced with --force is taken by the next refresh)
    now = fingerprint(conn, source)
    return now if now == last[0] else None


def refresh_due(
    conn: psycopg.Connection,
    *,
    now: datetime | None = None,
    force: bool = False,
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """Refresh every due release; one failing does not stop the others. Returns what happened
    to each scheduled release: refreshed, skipped (unchanged source), refused (the previous
    release kept), failed, busy, not due; refused and failed ones with their error and exit."""
    results = []
    for s in schedules(conn, now):
        name = s["release"]
        if not s["due"]:
            results.append({"release": name, "outcome": "not due", "next_due_at": s["next_due_at"]})
            continue
        try:
            # Whether the source changed is decided under the run's own lock, so two
            # overlapping `--due` runs cannot both refresh one change.
            skip = None if force else (lambda c, name=name: _unchanged(c, name))
            result = refresh(conn, name, progress, skip_if=skip)
            result = diffexposure.with_warning(load_spec(conn, name), result)
            conn.rollback()
            results.append({"release": name, "outcome": "refreshed", **result.summary()})
        except Unchanged:
            results.append({"release": name, "outcome": "skipped"})
        except runs.Busy as e:
            results.append({"release": name, "outcome": "busy", "error": str(e)})
        except (DbanonError, psycopg.Error) as e:
            conn.rollback()
            outcome = "refused" if isinstance(e, Refused) else "failed"
            results.append({"release": name, "outcome": outcome, "error": first_line(e),
                            "exit": EXIT_CODES[outcome]})  # fmt: skip
    return results


def exit_code(results: list[dict[str, Any]]) -> int:
    """The exit code of `refresh --due`: that of its worst outcome (EXIT_CODES), else 0."""
    outcomes = {r["outcome"] for r in results}
    return next((code for outcome, code in EXIT_CODES.items() if outcome in outcomes), 0)


# --- installing the timer -----------------------------------------------------------------------
#
# The job must reach the server this command reaches, with the environment cron or systemd gives
# it (almost none): the embedded server through DBANON_HOME; a DSN (--dsn, DBANON_DSN) through
# DBANON_DSN; libpq's environment through its PG* variables. A password (in the DSN, or in
# PGPASSWORD) never goes into the crontab or the units: it goes into a libpq passfile of mode 0600
# that the DSN (or PGPASSFILE) names, one line per server as in ~/.pgpass (host, port, database,
# user), so installing for a second server keeps the first one's line. The server is connected
# to first; nothing is written when that fails, nor when the command only prints (the password
# is stored by --save-password, or by --write DIR, which installs the units).

PASSFILE = "dbanon-refresh.pgpass"


def _exe() -> list[str]:
    """The dbanon of this installation (the script beside this Python), by absolute path."""
    beside = Path(sys.executable).parent / "dbanon"
    exe = str(beside) if beside.exists() else shutil.which("dbanon")
    return [exe] if exe else [sys.executable, "-m", "dbanon"]


def _pgpass_escape(field: str) -> str:
    return field.replace("\\", "\\\\").replace(":", "\\:")


def _pgpass_fields(line: str) -> list[str]:
    """A passfile line's fields, unescaped (libpq: `\\:` and `\\\\` inside a field)."""
    fields, cur, escaped = [], [], False
    for ch in line.rstrip("\n"):
        if escaped:
            cur.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ":" and len(fields) < 4:
            fields.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    return [*fields, "".join(cur)]


def _default_socket_dir() -> str:
    """The socket directory this libpq uses when no host is given: libpq matches a passfile
    line's host `localhost` for it (and the directory's path for any other). Asked of libpq
    itself: a connection started (never completed) with an empty host reports it."""
    pgconn = psycopg.pq.PGconn.connect_start(b"host='' port=1 connect_timeout=1")
    try:
        return (pgconn.host or b"").decode()
    finally:
        pgconn.finish()


def server_entry(conn: psycopg.Connection) -> tuple[str, str, str, str]:
    """host, port, database, user of a connection, as libpq matches them in a passfile."""
    host = conn.info.host
    if not host or host == _default_socket_dir():
        host = "localhost"
    return host, str(conn.info.port), conn.info.dbname, conn.info.user


def save_password(path: Path, entry: tuple[str, str, str, str], password: str) -> None:
    """Add or replace the line of one server in the passfile, keeping every other server's
    (a `*:*:*:*` line, which older versions wrote, would match every server first: dropped)."""
    keep = []
    if path.exists():
        for line in path.read_text().splitlines():
            fields = _pgpass_fields(line)[:4]
            if line.strip() and fields != list(entry) and fields != ["*"] * 4:
                keep.append(line + "\n")
    ours = ":".join(_pgpass_escape(f) for f in (*entry, password)) + "\n"
    _write_secret(path, "".join([*keep, ours]))


def _write_secret(path: Path, text: str) -> None:
    """Create or replace `path` readable by its owner only, never briefly wider, whole (a
    reader sees the old file or the new one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)
    os.replace(part, path)


def secrets_dir() -> Path:
    return platformdirs.user_config_path("dbanon")


def job_environment(
    dsn: str | None, directory: str | Path | None = None, *, save: bool = False
) -> tuple[dict[str, str], dict[str, Any], str]:
    """The variables the job needs to reach the server in use, what became of its password
    (`passfile`, whether `saved`, the server's `entry`), and where the choice came from (see
    connection). The server is connected to first: one that cannot be reached is refused."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from dbanon.db.connection import connect

    passfile = Path(directory or secrets_dir()).absolute() / PASSFILE
    password: str | None = None
    env: dict[str, str]
    if dsn or os.environ.get("DBANON_DSN"):
        source = "--dsn" if dsn else "DBANON_DSN"
        try:
            params = conninfo_to_dict(dsn or os.environ["DBANON_DSN"])
        except psycopg.ProgrammingError as e:
            raise DbanonError(
                f"{source} is not a libpq connection string: {first_line(e)}"
            ) from None
        password = params.pop("password", None) or os.environ.get("PGPASSWORD")
        if password:
            params["passfile"] = str(passfile)
        env = {"DBANON_DSN": make_conninfo("", **params)}
    elif named := [v for v in LIBPQ_SERVER_VARIABLES if os.environ.get(v)]:
        env = {k: v for k, v in os.environ.items() if k.startswith("PG") and k != "PGPASSWORD"}
        password = os.environ.get("PGPASSWORD")
        if password:
            env["PGPASSFILE"] = str(passfile)
        env = dict(sorted(env.items()))
        source = f"libpq environment ({', '.join(named)})"
    else:
        home = server.data_dir().parent.absolute()
        env, source = {"DBANON_HOME": str(home)}, f"embedded server ({home / 'pgdata'})"
    try:
        with connect(dsn) as conn:  # the server as this command reaches it, password and all
            entry = server_entry(conn)
    except DbanonError as e:
        raise DbanonError(f"the job could not reach the server chosen by {source}: {e}") from None
    secret: dict[str, Any] = {"needed": bool(password), "saved": False}
    if password:
        secret.update(passfile=str(passfile), entry=":".join(entry))
        if save:
            save_password(passfile, entry, str(password))
            secret["saved"] = True
    return env, secret, source


def _cron_escape(command: str) -> str:
    """cron turns an unescaped % into a newline (the rest becomes the job's stdin)."""
    return command.replace("%", "\\%")


def cron_line(env: dict[str, str]) -> str:
    """A crontab line that asks every few minutes which releases are due (cron runs the part
    after the five time fields with /bin/sh, after turning each unescaped % into a newline)."""
    assign = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    cmd = " ".join(shlex.quote(c) for c in [*_exe(), "refresh", "--due", "--json"])
    job = f'{assign} {cmd} >> "$HOME/dbanon-refresh.log" 2>&1'
    return f"*/{CHECK_EVERY_MINUTES} * * * * {_cron_escape(job)}\n"


def _systemd_quote(word: str, *, exec_line: bool = False) -> str:
    """One word for a unit file: double-quoted, C escapes for \\ and \", %% for a literal %
    (specifiers), and $$ for a literal $ in ExecStart= (variable expansion)."""
    text = word.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    if exec_line:
        text = text.replace("$", "$$")
    return f'"{text}"'


def systemd_units(env: dict[str, str], user: str | None = None) -> dict[str, str]:
    """A oneshot service running `dbanon refresh --due` as `user` (default: the one installing)
    with the environment the job needs, and a timer that starts it."""
    user = user or pwd.getpwuid(os.geteuid()).pw_name
    cmd = " ".join(
        _systemd_quote(c, exec_line=True) for c in [*_exe(), "refresh", "--due", "--json"]
    )
    environment = "".join(f"Environment={_systemd_quote(f'{k}={v}')}\n" for k, v in env.items())
    return {
        "dbanon-refresh.service": (
            "[Unit]\nDescription=dbanon: refresh the releases that are due\n"
            "After=network-online.target\n\n"
            f"[Service]\nType=oneshot\nUser={user}\n{environment}ExecStart={cmd}\n"
        ),
        "dbanon-refresh.timer": (
            "[Unit]\nDescription=dbanon: check for due releases every "
            f"{CHECK_EVERY_MINUTES} minutes\n\n"
            f"[Timer]\nOnCalendar=*:0/{CHECK_EVERY_MINUTES}\nPersistent=true\n\n"
            "[Install]\nWantedBy=timers.target\n"
        ),
    }


def write_units(units: dict[str, str], directory: str | Path) -> list[str]:
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in units.items():
        (path / name).write_text(text)
        written.append(str(path / name))
    return written


def install(
    kind: str, dsn: str | None, directory: str | Path | None = None, *, save: bool = False
) -> dict[str, Any]:
    """What `schedule install` prints or writes: a cron line, or systemd units (written into
    `directory` when given), the server chosen and its password's passfile (stored with `save`
    or `directory` only; nothing is written unless the server answered)."""
    if kind not in ("cron", "systemd"):
        raise DbanonError("give --cron or --systemd")
    if kind == "cron" and directory is not None:
        raise DbanonError("--write goes with --systemd; add the cron line with `crontab -e`")
    env, secret, source = job_environment(dsn, directory, save=save or directory is not None)
    secrets = [secret["passfile"]] if secret["saved"] else []
    out: dict[str, Any] = {"server": source, "environment": env, "password": secret,
                           "secrets": secrets}  # fmt: skip
    if kind == "cron":
        return {"cron": cron_line(env), **out}
    units = systemd_units(env)
    if directory is not None:
        return {"written": write_units(units, directory), **out}
    return {"units": units, **out}
