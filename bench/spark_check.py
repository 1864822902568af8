"""`faultline check --spark` against the single-process checker on one big history.

    python bench/spark_check.py [--ops 1e7] [--keys 1e4] [--master local[2]]
                                [--time-limit 600] [--dir DIR]

Generates a linearizable kv history (checkers/linearizability/synth.py:
get/put/cas per key, Zipf-skewed keys, 50 clients, 1% crashed ops) of
`--ops` operations over `--keys` keys, writes it as history.jsonl, then runs
`faultline check --checker linearizable` and `faultline check --spark` on it,
each as a whole process, and prints for both: the verdict, wall seconds, and
the peak of the summed resident memory of the process and all its
descendants (for Spark: the driver, its JVM and the Python workers),
sampled every 0.2 s from /proc. The single process is the one that has to
hold the whole history; Spark spreads it over executors and spills.
"""

from __future__ import annotations

import argparse
import os
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


def measure(cmd: list[str], timeout_s: float) -> tuple[float, int, str]:
    """(wall s, peak tree RSS in MB, last line of stdout) of `cmd`."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
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
    lines = [line for line in out.splitlines() if line.strip()]
    return time.monotonic() - started, peak // 1024, lines[-1] if lines else "(no output)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=float, default=1e7)
    parser.add_argument("--keys", type=float, default=1e4)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--time-limit", type=float, default=600.0,
                        help="the local check's budget, and --spark's per key")  # fmt: skip
    parser.add_argument("--dir", type=Path, help="where the history goes (default: a temp dir)")
    opts = parser.parse_args()
    work = opts.dir or Path(tempfile.mkdtemp(prefix="spark-check-"))
    work.mkdir(parents=True, exist_ok=True)
    history = work / "history.jsonl"
    spec = SynthSpec(model="kv", ops=int(opts.ops), keys=int(opts.keys), clients=50,
                     info_rate=0.01, append_rate=0.0, seed=7)  # fmt: skip
    t = time.monotonic()
    ops = synthesize(spec, MODELS["kv"])
    with history.open("wb") as out:
        for event in events_of(ops):
            out.write(msgspec.json.encode(event) + b"\n")
    del ops
    size_mb = history.stat().st_size / 2**20
    print(f"history: {int(opts.ops):,} ops over {int(opts.keys):,} keys, {size_mb:.0f} MB, "
          f"written in {time.monotonic() - t:.0f} s ({history})", flush=True)  # fmt: skip
    faultline = [str(REPO / ".venv" / "bin" / "faultline"), "check", str(history), "--no-write",
                 "--checker", "linearizable", "--model", "kv",
                 "--time-limit", str(opts.time_limit)]  # fmt: skip
    print(f"{'checker':<28} {'wall s':>8} {'peak MB':>8}  verdict")
    timeout = opts.time_limit * 4 + 600
    for label, cmd in (("single process", faultline),
                       (f"--spark {opts.master}", [*faultline, "--spark", "--master",
                                                   opts.master])):  # fmt: skip
        wall, peak, verdict = measure(cmd, timeout)
        print(f"{label:<28} {wall:>8.1f} {peak:>8}  {verdict}", flush=True)
    print(f"load average: {os.getloadavg()[0]:.1f} (2-core machine: read the figures with it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
