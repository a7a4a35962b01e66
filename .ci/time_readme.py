"""Time the README's two commands as written, in a fresh clone, and record them in
docs/timings/readme.json (the README's timings block is generated from that file by `dbanon docs`).

Usage: python .ci/time_readme.py [demo|tests ...]   (default: both, in that order, in one clone:
the second command then finds the first one's virtualenv, as a newcomer running both would)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "timings" / "readme.json"
LABELS = {"demo": "the first: install, then dbanon demo",
          "tests": "the second: install (again), then the tests"}


def commands() -> dict[str, str]:
    blocks = re.findall(r"```sh\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S)
    return {"demo": blocks[0].strip(), "tests": blocks[1].strip()}


def main(which: list[str]) -> None:
    data = json.loads(OUT.read_text()) if OUT.exists() else {"timings": []}
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "dbanon"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        shared = ROOT.parent / "shared"
        if shared.exists() and not (clone.parent / "shared").exists():
            (clone.parent / "shared").symlink_to(shared)
        env = {**os.environ, "DBANON_HOME": str(Path(tmp) / "home")}
        for name in which:
            cmd = commands()[name]
            t0 = time.monotonic()
            done = subprocess.run(["sh", "-c", cmd], cwd=clone, env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
            seconds = time.monotonic() - t0
            if done.returncode:  # nothing is recorded for a command that failed
                sys.exit(f"{name}: exit {done.returncode}\n{done.stdout[-6000:]}")
            data["timings"] = [t for t in data["timings"] if t["name"] != name] + [{
                "name": name, "what": LABELS[name],
                "seconds": round(seconds, 1),
                "machine": f"{os.cpu_count()} cores, load {load:.1f} when started",
                "date": date.today().isoformat(),  # each its own: one may be re-timed alone
            }]  # fmt: skip
        subprocess.run(["sh", "-c", f"{clone}/.venv/bin/dbanon server stop || true"], env=env)
    data["timings"].sort(key=lambda t: ["demo", "tests"].index(t["name"]))
    data["measured"] = "by `python .ci/time_readme.py`, fresh clone"
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:] or ["demo", "tests"])
