"""Hand freed column-sized arrays back to the operating system at once (glibc).

glibc serves a large allocation with its own mmap and unmaps it when freed, but after the
first such free it raises that threshold (up to 32 MiB) and serves later arrays from the heap,
where freed memory mostly stays with the process. A run that makes and drops many arrays of a
column's size (8 MB a column at a million rows) then holds their sum at its peak: fixing the
threshold made a million-row k-member publish peak at 293 MiB instead of 310. A process that
is not on glibc keeps its allocator's own rules.

The threshold is 1 MiB, not glibc's starting 128 KiB: below it are the arrays of a block, a
chunk or a partition (k-member's and (θ,k)'s blocks, a COPY chunk's offsets, the compiled
kernels' temporaries), made and dropped thousands of times a run. Mapped, each cost its
first-touch page faults and an unmap (a TLB flush on every core the process ran on): at
128 KiB a million-row k-member publish took 491,000 page faults and 2.4 s of system time, at
1 MiB 320,000 and 1.6 s, its wall time 9.4 s -> 8.2 s (medians of 4, alternating) for 5 MiB
more at its peak (296 MiB); at 2 MiB the peak was 305 MiB, at 4 MiB 319 MiB.

At its end a process is left to the operating system, which frees its memory at once, rather
than to the interpreter's teardown, which frees numba's and the run's objects one by one (0.2 s
after a million-row publish): `exit_without_teardown`, as the `dbanon` command ends."""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import os
import sys
import threading

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)
THRESHOLD = 1 << 20  # bytes: larger arrays are mapped, and unmapped when freed


def return_freed_memory() -> bool:
    """Fix glibc's mmap and trim thresholds for this process; whether it could."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, THRESHOLD)
    )


def exit_without_teardown(code: object = 0) -> None:
    """End the process without the interpreter's teardown. What a normal exit does that
    matters is done first: the atexit handlers run and the streams are flushed. With a thread
    still running, or an exit code that is not a number, the normal exit."""
    others = [t for t in threading.enumerate() if t is not threading.main_thread()]
    if not isinstance(code, int) or any(t.is_alive() and not t.daemon for t in others):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing more to say
            code = code or 120  # as CPython exits when it cannot flush stdout
    os._exit(code)
