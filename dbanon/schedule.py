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

from dbanon import diffexposure, hierarchy_pins, release, runs
from dbanon.db import catalog, server
from dbanon.db.connection import LIBPQ_SERVER_VARIABLES
from dbanon.errors import DbanonError, first_line

CHECK_EVERY_MINUTES = 5  # how often the installed timer asks which releases are due
# The exit code of `refresh --due` for each outcome that needs the DBA, worst first: a failure
# (the run could not even be judged: something needs repair) before a refusal (the previous
# release is kept until the DBA chooses). A busy release is the next tick's business: exit 0.
EXIT_CODES = {"failed": 2, "refused": 4}


def _release_id(conn: psycopg.Connection, name: str) -> int:
    catalog.require_catalog(conn)
    row = conn.execute("SELECT id FROM dbanon.release WHERE name = %s", [name]).fetchone()
    if row is None:
        raise DbanonError(f"release {name!r} does not exist (see `dbanon releases`)")
    return row[0]


def set_schedule(
    conn: psycopg.Connection, name: str, *, every: str | None = None, cron: str | None = None
) -> dict[str, Any]:
    """Schedule a release (replacing its schedule), in the caller's transaction."""
    if (every is None) == (cron is None):
        raise DbanonError("give one of --every INTERVAL or --cron EXPRESSION")
    rid = _release_id(conn, name)
    if cron is not None:
        from croniter import croniter

        if not croniter.is_valid(cron):
            raise DbanonError(f"--cron {cron!r} is not a cron expression (e.g. '0 3 * * *')")
    else:
        try:
            with conn.transaction():
                positive = conn.execute("SELECT %s::interval > interval '0'", [every]).fetchone()[0]
        except psycopg.errors.DataError:
            raise DbanonError(f"--every {every!r} is not an interval (e.g. '6 hours')") from None
        if not positive:
            raise DbanonError(f"--every {every!r} must be a positive interval")
    conn.execute(
        """INSERT INTO dbanon.schedule (release_id, every, cron) VALUES (%s, %s::interval, %s)
           ON CONFLICT (release_id) DO UPDATE SET every = EXCLUDED.every, cron = EXCLUDED.cron""",
        [rid, every, cron],
    )
    return {"release": name, "every": every, "cron": cron}


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
        """SELECT r.name, s.every, s.cron,
                  (SELECT max(u.started_at) FROM dbanon.run u WHERE u.release_id = r.id
                     AND u.status IN ('succeeded', 'skipped'))
           FROM dbanon.schedule s JOIN dbanon.release r ON r.id = s.release_id
           ORDER BY r.name"""
    ).fetchall()
    out = []
    for name, every, cron, last in rows:
        nxt = _next_due(every, cron, last)
        out.append(
            {
                "release": name,
                "every": str(every) if every is not None else None,
                "cron": cron,
                "last_run_at": last.isoformat() if last else None,
                "next_due_at": nxt.isoformat() if nxt else None,
                "due": nxt is None or nxt <= now,
            }
        )
    return out


def _unchanged(conn: psycopg.Connection, name: str) -> str | None:
    """The source's fingerprint if it equals the one of the release's latest success."""
    spec = release.load_spec(conn, name)
    last = conn.execute(
        """SELECT u.source_fingerprint FROM dbanon.run u JOIN dbanon.release r
               ON r.id = u.release_id
           WHERE r.name = %s AND u.status = 'succeeded' ORDER BY u.started_at DESC LIMIT 1""",
        [name],
    ).fetchone()
    source = catalog.find_relation(conn, spec.source)
    if last is None or source is None or hierarchy_pins.stale(conn, name):
        return None  # (a hierarchy replaced with --force is taken by the next refresh)
    now = release.fingerprint(conn, source)
    return now if now == last[0] else None


def refresh_due(
    conn: psycopg.Connection,
    *,
    now: datetime | None = None,
    force: bool = False,
    progress: release.Progress | None = None,
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
            result = release.refresh(conn, name, progress, skip_if=skip)
            result = diffexposure.with_warning(release.load_spec(conn, name), result)
            conn.rollback()
            results.append({"release": name, "outcome": "refreshed", **result.summary()})
        except release.Unchanged:
            results.append({"release": name, "outcome": "skipped"})
        except runs.Busy as e:
            results.append({"release": name, "outcome": "busy", "error": str(e)})
        except (DbanonError, psycopg.Error) as e:
            conn.rollback()
            outcome = "refused" if isinstance(e, release.Refused) else "failed"
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
# that the DSN (or PGPASSFILE) names.

PASSFILE = "dbanon-refresh.pgpass"


def _exe() -> list[str]:
    """The dbanon of this installation (the script beside this Python), by absolute path."""
    beside = Path(sys.executable).parent / "dbanon"
    exe = str(beside) if beside.exists() else shutil.which("dbanon")
    return [exe] if exe else [sys.executable, "-m", "dbanon"]


def _passfile_line(password: str) -> str:
    """A passfile entry for any host, port, database and user: the file serves this job only."""
    return "*:*:*:*:" + password.replace("\\", "\\\\").replace(":", "\\:") + "\n"


def _write_secret(path: Path, text: str) -> None:
    """Create or replace `path` readable by its owner only, never briefly wider."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)


def secrets_dir() -> Path:
    return platformdirs.user_config_path("dbanon")


def job_environment(
    dsn: str | None, directory: str | Path | None = None
) -> tuple[dict[str, str], list[str], str]:
    """The variables the job needs to reach the server in use, the secret files written for it
    (a passfile, when there is a password), and where the choice came from (see connection)."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    passfile = Path(directory or secrets_dir()).absolute() / PASSFILE
    written: list[str] = []
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
            _write_secret(passfile, _passfile_line(str(password)))
            params["passfile"] = str(passfile)
            written.append(str(passfile))
        return {"DBANON_DSN": make_conninfo("", **params)}, written, source
    named = [v for v in LIBPQ_SERVER_VARIABLES if os.environ.get(v)]
    if named:
        env = {k: v for k, v in os.environ.items() if k.startswith("PG") and k != "PGPASSWORD"}
        if os.environ.get("PGPASSWORD"):
            _write_secret(passfile, _passfile_line(os.environ["PGPASSWORD"]))
            env["PGPASSFILE"] = str(passfile)
            written.append(str(passfile))
        return dict(sorted(env.items())), written, f"libpq environment ({', '.join(named)})"
    home = server.data_dir().parent.absolute()
    return {"DBANON_HOME": str(home)}, written, f"embedded server ({home / 'pgdata'})"


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


def install(kind: str, dsn: str | None, directory: str | Path | None = None) -> dict[str, Any]:
    """What `schedule install` prints or writes: a cron line, or systemd units (written into
    `directory` when given), plus the secret files written for the job and the server chosen."""
    if kind not in ("cron", "systemd"):
        raise DbanonError("give --cron or --systemd")
    if kind == "cron" and directory is not None:
        raise DbanonError("--write goes with --systemd; add the cron line with `crontab -e`")
    env, secrets, source = job_environment(dsn, directory)
    out: dict[str, Any] = {"server": source, "environment": env, "secrets": secrets}
    if kind == "cron":
        return {"cron": cron_line(env), **out}
    units = systemd_units(env)
    if directory is not None:
        return {"written": write_units(units, directory), **out}
    return {"units": units, **out}
