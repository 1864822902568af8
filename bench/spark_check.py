"""`faultline check --spark` against the single-process checker on one big history.

    python bench/spark_check.py [--ops 1e7] [--keys 1e4] [--skew 0] [--master local[2]]
                                [--time-limit 600] [--only spark|single] [--mem-cap-gb 14]
                                [--dir DIR]

Generates a linearizable kv history (checkers/linearizability/synth.py:
get/put/cas per key, keys uniform or Zipf-skewed by --skew, 50 clients, 1%
crashed ops) of
`--ops` operations over `--keys` keys, writes it as history.jsonl, then runs
`faultline check --checker linearizable` and `faultline check --spark` on it,
each as a whole process, and prints for both: the verdict, wall seconds, and
the peak of the summed resident memory of the process and all its
descendants (for Spark: the driver, its JVM and the Python workers),
sampled every 0.2 s from /proc. The single process is the one that has to
hold the whole history; Spark spreads it over executors and spills. The
single process runs under an address-space cap (--mem-cap-gb) so that a
history too large for this machine ends that process, not the machine.

Skew matters more than size: at --skew 1.1 one key of 10^4 holds 15% of
the operations, and that key's search (one task, whatever the cluster)
sets both times. Spark can only spread keys.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from checkers.importers.formats import events_of
from checkers.linearizability import MODELS
from checkers.linearizability.synth import SynthSpec, synthesize

REPO = Path(__file__).resolve().parent.parent


def _tree_rss_kb(root: int) -> int:
    """The summed VmRSS of `root` and its descendants (kB)."""
    parent: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        parent[int(entry)] = int(fields.get("PPid", "0").strip())
        rss[int(entry)] = int(fields.get("VmRSS", "0 kB").split()[0])
    tree, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        kids = [p for p, pp in parent.items() if pp == pid and p not in tree]
        tree.update(kids)
        frontier += kids
    return sum(rss.get(p, 0) for p in tree)


def measure(cmd: list[str], timeout_s: float, cap_gb: float = 0) -> tuple[float, int, str]:
    """(wall s, peak tree RSS in MB, last line of stdout) of `cmd`."""

    def cap() -> None:
        if cap_gb:
            limit = int(cap_gb * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=cap)  # fmt: skip
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_rss_kb(proc.pid))
            done.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        out += "\ntimed out"
    done.set()
    sampler.join()
    lines = [line for line in out.splitlines() if line.strip() and "WARN" not in line]
    last = lines[-1] if lines else "(no output)"
    if proc.returncode not in (0, 1, 2) or "MemoryError" in out:
        last = f"exit {proc.returncode}: {last[:120]}"
    return time.monotonic() - started, peak // 1024, last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=float, default=1e7)
    parser.add_argument("--keys", type=float, default=1e4)
    parser.add_argument("--skew", type=float, default=0.0, help="Zipf exponent of key choice")
    parser.add_argument("--only", choices=("spark", "single"))
    parser.add_argument("--mem-cap-gb", type=float, default=14.0,
                        help="address-space cap of the single process (0: none)")  # fmt: skip
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--time-limit", type=float, default=600.0,
                        help="the local check's budget, and --spark's per key")  # fmt: skip
    parser.add_argument("--dir", type=Path, help="where the history goes (default: a temp dir)")
    opts = parser.parse_args()
    work = opts.dir or Path(tempfile.mkdtemp(prefix="spark-check-"))
    work.mkdir(parents=True, exist_ok=True)
    history = work / f"kv-{int(opts.ops)}ops-{int(opts.keys)}keys-skew{opts.skew:g}.jsonl"
    spec = SynthSpec(model="kv", ops=int(opts.ops), keys=int(opts.keys), clients=50,
                     info_rate=0.01, append_rate=0.0, skew=opts.skew, seed=7)  # fmt: skip
    t = time.monotonic()
    if not history.is_file():  # the same spec's history is reused (it takes minutes at 10^7)
        ops = synthesize(spec, MODELS["kv"])
        with history.open("wb") as out:
            for event in events_of(ops):
                out.write(msgspec.json.encode(event) + b"\n")
        del ops
    size_mb = history.stat().st_size / 2**20
    print(f"history: {int(opts.ops):,} ops over {int(opts.keys):,} keys (skew {opts.skew:g}), "
          f"{size_mb:.0f} MB, ready in {time.monotonic() - t:.0f} s ({history})",
          flush=True)  # fmt: skip
    faultline = [str(REPO / ".venv" / "bin" / "faultline"), "check", str(history), "--no-write",
                 "--checker", "linearizable", "--model", "kv",
                 "--time-limit", str(opts.time_limit)]  # fmt: skip
    print(f"{'checker':<28} {'wall s':>8} {'peak MB':>8}  verdict")
    timeout = opts.time_limit * 4 + 600
    runs = [("spark", f"--spark {opts.master}", [*faultline, "--spark", "--master", opts.master],
             0.0), ("single", "single process", faultline, opts.mem_cap_gb)]  # fmt: skip
    for kind, label, cmd, cap_gb in runs:
        if opts.only and kind != opts.only:
            continue
        wall, peak, verdict = measure(cmd, timeout, cap_gb)
        print(f"{label:<28} {wall:>8.1f} {peak:>8}  {verdict}", flush=True)
    print(f"load average: {os.getloadavg()[0]:.1f} (2-core machine: read the figures with it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
