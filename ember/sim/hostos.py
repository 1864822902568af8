"""What the simulated processes see of the operating system: clocks and durable files.

Theory of operation
-------------------
ember's code reads the time through the `time` module and persists through
`os.write` / `os.fsync` / `os.fdatasync` / `os.replace`. Like madsim, which
intercepts the libc calls of a Rust program, the simulator interposes on
those calls while a simulation runs (`simulated_os`) rather than adding a
branch to ember: the daemon in the Docker image and the simulated node run
the same lines.

- **Clocks.** `time.monotonic` / `perf_counter` read the loop's virtual
  clock; `time.time` is a fixed epoch plus that clock plus the running
  process's host clock offset (`Proc.clock`, a `HostClock`: zero unless a
  clock fault moved it). `time.sleep` inside a simulation is a bug (it would stop the
  world): it raises.
- **Durability.** The files are real files under the run's directory, so
  recovery code reads them as it always does; what the simulator adds is
  what a crash keeps. `fsync` / `fdatasync` record the file's size as
  durable (without paying for a real fsync); a rename carries the record to
  the new name. An fsync made in a thread (the node's WAL commit runs in
  its executor) counts only when the thread's future completes
  (`SimLoop.thread_effects`): a kill inside that window loses the round.
  `Disk.crash` then truncates every file of a killed node to its durable
  size, and with probability `tear_probability` keeps a seeded
  prefix of the unsynced tail instead (a torn last record), and deletes
  files never synced. The node's audit log and ember.log are the
  observer's record, not state it recovers from: they are left whole.
  Directory entries are taken as durable at once (a simplification: a
  create or rename is not lost by a crash here).
- **Boot id.** `ember.audit.kernel_boot_id` reads `SIM_BOOT_ID`: the
  processes of a simulation share one kernel's monotonic clock.
- **Exits.** `os._exit` (ember's `crash` failpoint) kills the calling
  process only: `on_exit` is told, and `ProcessExited` unwinds its stack.
- **Other threads.** The patch is process-wide, but only the simulation's
  thread sees it: any other thread (a library's, left running) keeps the
  real clock, sleep and file calls.
- **Descriptors.** Raw descriptors a process opens are remembered, so a
  crash closes them (releasing the store's lock) as the kernel would.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ember import audit
from ember.sim.loop import SimLoop
from ember.sim.procs import Proc, current_proc

EPOCH_S = 1_767_225_600.0  # 2026-01-01T00:00:00Z: virtual wall time starts here
SIM_BOOT_ID = "simulated-kernel"  # what `ember.audit.kernel_boot_id` reads in a simulation
OBSERVER_FILES = frozenset({"events.jsonl", "ember.log"})


class SleepInSimulation(RuntimeError):  # noqa: N818 -- reads as what happened
    """Blocking `time.sleep` was called inside the simulation."""


class ProcessExited(BaseException):
    """`os._exit` in a simulated process: it dies here, the simulation goes on."""


@dataclass
class Disk:
    """Durable sizes of the files the simulated processes fsynced."""

    rng: random.Random
    tear_probability: float = 0.3
    durable: dict[str, int] = field(default_factory=dict)
    torn: int = 0  # crashes that left a torn tail somewhere
    lost_bytes: int = 0

    # fsyncs made inside a (simulated) thread: durable once the thread's work completes
    _staged: list[tuple[str, int]] | None = None

    def synced(self, fd: int) -> None:
        with contextlib.suppress(OSError):
            path = os.readlink(f"/proc/self/fd/{fd}")
            if os.path.isfile(path):
                size = os.fstat(fd).st_size
                if self._staged is not None:
                    self._staged.append((path, size))
                else:
                    self.durable[path] = size

    def renamed(self, src: Any, dst: Any) -> None:
        old, new = os.path.abspath(os.fsdecode(src)), os.path.abspath(os.fsdecode(dst))
        old_real, new_real = os.path.realpath(old), os.path.realpath(new)
        size = self.durable.pop(old_real, self.durable.pop(old, None))
        if size is not None:
            self.durable[new_real] = size
        if self._staged:
            self._staged = [(new_real if p in (old, old_real) else p, n) for p, n in self._staged]

    # SimLoop.thread_effects: a thread's fsyncs count when its future completes.

    def begin(self) -> list[tuple[str, int]] | None:
        outer, self._staged = self._staged, []
        return outer

    def end(self, outer: list[tuple[str, int]] | None) -> Callable[[], None]:
        staged, self._staged = self._staged or [], outer

        def make_durable() -> None:
            for path, size in staged:
                self.durable[path] = size

        return make_durable

    def crash(self, root: Path) -> list[str]:
        """Cut every file under `root` back to what was durable; returns what changed."""
        changed = []
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            if path.name in OBSERVER_FILES:
                continue
            real = os.path.realpath(path)
            size = path.stat().st_size
            keep = self.durable.get(real)
            if keep is None:
                path.unlink()
                self.lost_bytes += size
                changed.append(f"{path.name}: never synced, gone")
                continue
            if size <= keep:
                continue
            cut = keep
            if size - keep > 1 and self.rng.random() < self.tear_probability:
                cut = keep + self.rng.randint(1, size - keep - 1)
                self.torn += 1
            os.truncate(path, cut)
            self.lost_bytes += size - cut
            changed.append(f"{path.name}: {size - cut} unsynced bytes lost")
        return changed


@contextlib.contextmanager
def simulated_os(loop: SimLoop, disk: Disk, on_exit: Callable[[Any, int], None]) -> Iterator[None]:
    """Interpose on the clock and file calls for the duration of a simulation."""

    def monotonic() -> float:
        return loop.time()

    def wall() -> float:
        proc = current_proc()
        now = loop.time()
        return EPOCH_S + now + (proc.clock.offset_at(now) if proc is not None else 0.0)

    def sleep(_seconds: float) -> None:
        raise SleepInSimulation("time.sleep() inside the simulation would stop every node")

    real_open, real_close = os.open, os.close

    def open_fd(path: Any, flags: int, mode: int = 0o777, *, dir_fd: Any = None) -> int:
        proc = _living()
        fd = real_open(path, flags, mode, dir_fd=dir_fd)
        if proc is not None:
            proc.fds.add(fd)
        return fd

    def close_fd(fd: int) -> None:
        proc = _living()
        if proc is not None:
            proc.fds.discard(fd)
        real_close(fd)

    real_rename, real_replace = os.rename, os.replace

    def rename(src: Any, dst: Any, **kw: Any) -> None:
        _living()
        real_rename(src, dst, **kw)
        disk.renamed(src, dst)

    def replace(src: Any, dst: Any, **kw: Any) -> None:
        _living()
        real_replace(src, dst, **kw)
        disk.renamed(src, dst)

    real_exit = os._exit

    def exit_process(code: int) -> None:
        proc = current_proc()
        if proc is None or proc.name == "harness":
            real_exit(code)
        if proc.alive:  # a killed process's `finally` exits nothing
            on_exit(proc, code)
        raise ProcessExited(code)

    def sync(fd: int) -> None:
        _living()
        disk.synced(fd if isinstance(fd, int) else fd.fileno())

    patches: list[tuple[Any, str, Callable[..., Any]]] = [
        (time, "monotonic", monotonic),
        (time, "perf_counter", monotonic),
        (time, "monotonic_ns", lambda: int(loop.time() * 1e9)),
        (time, "perf_counter_ns", lambda: int(loop.time() * 1e9)),
        (time, "time", wall),
        (time, "time_ns", lambda: int(wall() * 1e9)),
        (time, "sleep", sleep),
        (os, "open", open_fd),
        (os, "close", close_fd),
        (os, "rename", rename),
        (os, "replace", replace),
        (os, "fsync", sync),
        (os, "fdatasync", sync),
        (os, "_exit", exit_process),
        # One simulated kernel: every process shares the loop's monotonic clock.
        (audit, "kernel_boot_id", lambda: SIM_BOOT_ID),
    ]
    patches += _aliases(patches)
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in patches]
    here = threading.get_ident()
    try:
        for (mod, name, fn), (_, _, real) in zip(patches, saved, strict=True):
            setattr(mod, name, _on_thread(here, fn, real))
        loop.thread_effects = disk
        yield
    finally:
        loop.thread_effects = None
        for mod, name, fn in saved:
            setattr(mod, name, fn)


# Modules whose attributes are the real functions themselves, not aliases.
_OWNERS = frozenset({"time", "os", "posix", "nt"})


def _aliases(
    patches: list[tuple[Any, str, Callable[..., Any]]],
) -> list[tuple[Any, str, Callable[..., Any]]]:
    """The same patches for every loaded module that bound a patched function
    to a name of its own (`from time import monotonic`, as aiohttp's
    connector does): left alone, such a module reads the real clock, and a
    run's keep-alive decisions follow the machine's load instead of the seed.
    Modules imported after this point keep the real functions; the
    simulator's imports happen before a run starts."""
    real = {id(getattr(mod, name)): fn for mod, name, fn in patches}
    stdlib = sysconfig.get_paths()["stdlib"]
    found = []
    for mod_name, module in sorted(sys.modules.items()):
        if module is None or mod_name in _OWNERS or mod_name.startswith("_"):
            continue
        if (getattr(module, "__file__", None) or stdlib).startswith(stdlib):
            continue  # the standard library's own waits (threading's) keep real time
        for attr, value in list(getattr(module, "__dict__", {}).items()):
            fn = real.get(id(value))
            if fn is not None and callable(value):
                found.append((module, attr, fn))
    return found


def _on_thread(
    ident: int, fake: Callable[..., Any], real: Callable[..., Any]
) -> Callable[..., Any]:
    """`fake` on the simulation's thread, `real` on any other: the patch is
    process-wide, and a thread some library left running (py4j's, say) must
    keep the real clock and sleep."""

    get_ident = threading.get_ident

    def call(*args: Any, **kwargs: Any) -> Any:
        if get_ident() == ident:
            return fake(*args, **kwargs)
        return real(*args, **kwargs)

    return call


def _living() -> Proc | None:
    """The running process; OSError(EBADF) if it was killed. Its descriptors
    are the kernel's to close, and a number it held may belong to a live
    process by now; the `finally` blocks `SimLoop.kill` ends it with must
    not touch them, nor rename or sync what its crash is about to judge."""
    proc = current_proc()
    if proc is not None and not proc.alive:
        raise OSError(errno.EBADF, f"{proc.name} was killed")
    return proc


def close_descriptors(fds: set[int]) -> None:
    """Close what a killed process left open (the kernel does this on exit)."""
    for fd in sorted(fds):
        with contextlib.suppress(OSError):
            os.close(fd)
    fds.clear()
