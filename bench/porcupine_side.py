"""faultline vs porcupine, side by side, each as a whole process.

For every history: `faultline check FILE --checker linearizable` as a
subprocess, and porcupine (v1.3.0, built from its source with the machine's
Go toolchain by `build_porcupine`) deciding the same operations, also as a
subprocess. Both wall times include process start-up and reading the
input; porcupine reads the operations our importers produced, exported by
`export` to a JSON-lines file (porcupine has no reader of its own for these
formats), so the two check the same ops under the same meanings.

The ratio is ours / porcupine's wall time per history; the summary is the
geometric mean of the ratios, and the sums. When Go or porcupine's source
is missing, porcupine's recorded check times (shared fixtures,
porcupine_times.tsv: check only, no start-up) stand in, and the table says
so.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from checkers.linearizability.types import LinOp

REPO = Path(__file__).resolve().parent.parent
GO_MAIN = Path(__file__).resolve().parent / "porcupine_check" / "main.go"
ABSENT = "\x00"
_VERDICT = re.compile(r"^(valid|INVALID|unknown): ", re.MULTILINE)
_WORDS = {"valid": "linearizable", "INVALID": "not-linearizable", "unknown": "unknown"}


def build_porcupine(src: Path, out_dir: Path) -> Path | None:
    """Build the porcupine_check binary against porcupine's source at `src`
    (a v1.3.0 checkout); None (with a message) if Go or the source is missing."""
    go = shutil.which("go")
    if go is None or not (src / "go.mod").is_file():
        print(f"# porcupine not built: go={go}, source={src}", file=sys.stderr)
        return None
    build = out_dir / "porcupine_check"
    build.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(GO_MAIN, build / "main.go")
    (build / "go.mod").write_text(
        "module faultline/porcupine_check\n\ngo 1.16\n\n"
        "require github.com/anishathalye/porcupine v1.3.0\n\n"
        f"replace github.com/anishathalye/porcupine => {src.resolve()}\n"
    )
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOPROXY": "off", "GOSUMDB": "off",
           "GOPATH": str(out_dir / "gopath"), "GOCACHE": str(out_dir / "gocache")}  # fmt: skip
    binary = build / "porcupine_check.bin"
    proc = subprocess.run(
        [go, "build", "-o", str(binary), "."], cwd=build, env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        print(f"# porcupine build failed:\n{proc.stderr}", file=sys.stderr)
        return None
    return binary


def _render(value: Any) -> str:
    if value is None:
        return ABSENT
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"))


def export(ops: list[LinOp], path: Path) -> None:
    """Write `ops` (already aliased: read/write/cas/append, or get/put) in
    porcupine_check's input format."""
    names = {"get": "read", "put": "write"}
    with open(path, "w") as out:
        for op in ops:
            f = names.get(op.f, op.f)
            row: dict[str, Any] = {"p": op.process if isinstance(op.process, int) else -1,
                                   "c": op.call, "r": op.ret if op.known else -1, "f": f,
                                   "k": _render(op.key)}  # fmt: skip
            if f == "cas":
                row["a"], row["b"] = _render(op.input[0]), _render(op.input[1])
                row["s"] = op.output is not False
            elif f != "read":
                row["a"] = _render(op.input)
            if f == "read" and op.known:
                row["o"] = _render(op.output)
            out.write(json.dumps(row) + "\n")


def _timed(cmd: list[str], timeout_s: float) -> tuple[float, float, str, int]:
    """(wall s, child CPU s, stdout, exit code) of one subprocess."""
    before = os.times()
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        out, code = proc.stdout, proc.returncode
    except subprocess.TimeoutExpired:
        out, code = "unknown (killed at the process timeout)", -1
    wall = time.perf_counter() - start
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return wall, cpu, out, code


def run_ours(path: Path, model: str, fmt: str, limit_s: float) -> tuple[float, float, str]:
    """(wall, cpu, verdict) of `faultline check` on `path`."""
    cmd = [str(REPO / ".venv" / "bin" / "faultline"), "check", str(path), "--format", fmt,
           "--checker", "linearizable", "--model", model, "--no-write",
           "--time-limit", str(limit_s)]  # fmt: skip
    wall, cpu, out, _ = _timed(cmd, limit_s + 60)
    m = _VERDICT.search(out)
    return wall, cpu, _WORDS[m.group(1)] if m else f"error: {out.strip()[-80:]}"


def run_porcupine(
    binary: Path, ops: list[LinOp], nopart: bool, limit_s: float
) -> tuple[float, float, str]:
    """(wall, cpu, verdict) of porcupine_check on `ops` (export not timed)."""
    with tempfile.NamedTemporaryFile("w", suffix=".ops.jsonl", delete=False) as tmp:
        path = Path(tmp.name)
    try:
        export(ops, path)
        cmd = [str(binary), *(["-nopart"] if nopart else []), "-timeout", f"{limit_s}s", str(path)]
        wall, cpu, out, _ = _timed(cmd, limit_s + 60)
    finally:
        path.unlink()
    return wall, cpu, out.split()[0] if out.strip() else "error"


def geomean(ratios: list[float]) -> float:
    """The geometric mean (nan for none)."""
    good = [r for r in ratios if r > 0 and math.isfinite(r)]
    if not good:
        return float("nan")
    return math.exp(sum(math.log(r) for r in good) / len(good))
