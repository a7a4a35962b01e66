"""`python -m dbanon.bench.peak FILE MODULE ARGS...`: run MODULE as `__main__` with ARGS and, as
it ends, write this process's own peak resident set (VmHWM, kB) to FILE.

Why not the parent's wait4 ru_maxrss: Linux carries the high-water mark of the address space a
process leaves at exec into its rusage, and subprocess starts children by vfork, whose address
space is the parent's; so a lean child of a 137 MiB bench reads as 137 MiB. VmHWM belongs to
the address space the exec made, so it is the child's own."""

from __future__ import annotations

import atexit
import runpy
import sys
from pathlib import Path


def own_peak_kb() -> int | None:
    """This process's peak resident set in kB (None where /proc has no VmHWM)."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return None
    return next((int(line.split()[1]) for line in lines if line.startswith("VmHWM:")), None)


def main() -> None:
    out, module, *args = sys.argv[1:]
    sys.argv = [module, *args]
    # At exit, not after the module returns: the `dbanon` command ends its process itself
    # (dbanon.cli.run), after the atexit handlers.
    atexit.register(lambda: Path(out).write_text(str(own_peak_kb() or "")))
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
