"""Builds the ember node image offline, in three cached layers.

Theory of operation: no image registry is reachable, so nothing may depend
on pulling. The image is built in three steps, each tagged by a hash of
exactly the inputs it depends on, and a step whose tag already exists is
skipped outright (a warm rebuild is a few hashes and docker lookups):

1. base  `faultline-base:<hash of suite + package list>`: a standard Debian
   image if one is present locally (or can be pulled) with our packages
   installed on top; otherwise a rootfs bootstrapped with debootstrap from
   the mirror named in this machine's own apt sources, then `docker import`.
2. deps  `faultline-deps:<hash of base + dependencies + deps files>`: a venv
   with only what ember-node needs at run time (`EMBER_NODE_DEPS`, with the
   version bounds pyproject gives them, and what they pull), installed
   offline from a wheelhouse that `pip wheel` builds on the host (the
   image's python3 is Debian's 3.11, like the host's, so host wheels fit).
   The harness's own dependencies (pandas, pyarrow, plotly, ...) run on the
   host and never enter the image.
3. top   `faultline-ember:<hash of deps + source>`: the faultline wheel built
   from the current source and installed with --no-deps, also tagged
   `faultline-ember:latest`.

Large artifacts (rootfs, wheelhouse) live in images/cache/ (git-ignored).
Every failure is an `ImageBuildError` naming the step that failed.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker.errors

from harness.backends import aptsources
from harness.backends.engine import DockerUnavailableError, connect_docker

ROOT = Path(__file__).resolve().parent.parent
IMAGES_DIR = ROOT / "images"
CACHE_DIR = IMAGES_DIR / "cache"
SUITE = "bookworm"
LABEL = "faultline.image"
# Standard images that may already sit in the engine, best first.
STANDARD_BASES = ("debian:bookworm-slim", "debian:bookworm")
# Source the faultline wheel is built from; hashed for the top layer's tag.
SOURCE_PACKAGES = ("ember", "harness", "nemesis", "workloads", "checkers", "reports", "pipeline")
# The third-party distributions ember-node imports (ember.server and
# ember.runtime: msgspec for the wire and disk formats, aiohttp for HTTP).
# Their version bounds come from pyproject's dependency list, so the bound is
# declared once; rich (the harness's console output) stays on the host.
EMBER_NODE_DEPS = ("msgspec", "aiohttp")
_REQ_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class ImageBuildError(RuntimeError):
    """An image build step failed; the message names the step."""

    def __init__(self, step: str, detail: str) -> None:
        super().__init__(f"image build failed at step '{step}': {detail}")
        self.step = step


@dataclass(slots=True)
class BuildReport:
    """Tags produced and what each step did, with its time in seconds."""

    tag: str = ""
    steps: list[tuple[str, str, float]] = field(default_factory=list)

    def record(self, step: str, action: str, started: float) -> None:
        """Note that `step` did `action` (built / cached) since `started`."""
        self.steps.append((step, action, time.monotonic() - started))


def base_packages() -> list[str]:
    """The base image's Debian packages, from images/base-packages.txt."""
    lines = (IMAGES_DIR / "base-packages.txt").read_text().splitlines()
    return sorted({ln.split("#", 1)[0].strip() for ln in lines} - {""})


def project_dependencies() -> list[str]:
    """pyproject's (core) dependency list, as written."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return sorted(str(d) for d in data["project"]["dependencies"])


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def node_dependencies(
    deps: Iterable[str] | None = None, wanted: Iterable[str] = EMBER_NODE_DEPS
) -> list[str]:
    """The image's third-party requirements: pyproject's entries (`deps`,
    by default the current list) for the distributions in `wanted`. A wanted
    name missing from pyproject is an `ImageBuildError`: installing it
    unpinned would quietly diverge from what the host tests run against."""
    listed = project_dependencies() if deps is None else list(deps)
    by_name: dict[str, str] = {}
    for req in listed:
        match = _REQ_NAME.match(req.strip())
        if match:
            by_name[_canonical(match.group(0))] = req.strip()
    missing = [n for n in wanted if _canonical(n) not in by_name]
    if missing:
        raise ImageBuildError(
            "deps: requirements",
            f"{', '.join(missing)} not in pyproject's [project] dependencies",
        )
    return sorted(by_name[_canonical(n)] for n in wanted)


def build_requirements() -> list[str]:
    """What building the faultline wheel needs (kept in the wheelhouse)."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return sorted(str(d) for d in data["build-system"]["requires"])


def _digest(parts: Iterable[str | bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:12]


def _source_files(root: Path) -> list[Path]:
    files = [root / "pyproject.toml", root / "README.md"]
    for pkg in SOURCE_PACKAGES:
        files.extend(p for p in sorted((root / pkg).rglob("*.py")) if "__pycache__" not in p.parts)
    return [f for f in files if f.is_file()]


def snapshot_source(dest: Path, root: Path = ROOT) -> Path:
    """Copy the files the faultline wheel is built from into `dest`: a
    stable source for builds while the work tree keeps changing."""
    for f in _source_files(root):
        target = dest / f.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, target)
    return dest


def base_tag(salt: str = "") -> str:
    """Tag of the base image for the current suite and package list; a
    `salt` makes a distinct image chain (a cold build beside the cached one)."""
    salted = [salt] if salt else []  # an empty salt keeps the established tag
    return f"faultline-base:{_digest([SUITE, *base_packages(), 'v1', *salted])}"


def deps_tag(base: str) -> str:
    """Tag of the deps layer on `base` for the current dependencies."""
    files = [IMAGES_DIR / n for n in ("deps.Dockerfile", "entrypoint.sh", "sshd_faultline.conf")]
    parts: list[str | bytes] = [base, *node_dependencies()]
    parts += [f.read_bytes() for f in files]
    return f"faultline-deps:{_digest(parts)}"


def ember_tag(deps: str, root: Path = ROOT) -> str:
    """Tag of the top layer on `deps` for the source under `root`."""
    parts: list[str | bytes] = [deps, (IMAGES_DIR / "ember.Dockerfile").read_bytes()]
    for f in _source_files(root):
        parts += [str(f.relative_to(root)), f.read_bytes()]
    return f"faultline-ember:{_digest(parts)}"


def _has_image(client: Any, tag: str) -> bool:
    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def _run(step: str, argv: list[str], cwd: Path | None = None, timeout_s: float = 900) -> None:
    try:
        proc = subprocess.run(
            argv, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except FileNotFoundError as exc:
        raise ImageBuildError(step, f"{argv[0]} is not installed") from exc
    except subprocess.TimeoutExpired as exc:
        raise ImageBuildError(step, f"{argv[0]} took more than {timeout_s:.0f}s") from exc
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-12:])
        raise ImageBuildError(step, f"`{' '.join(argv[:3])} ...` exited {proc.returncode}:\n{tail}")


def docker_build(
    client: Any, step: str, context: Path, dockerfile: str, tag: str, **args: str
) -> None:
    """`docker build` through the SDK; a failure names `step` and the log's tail."""
    try:
        client.images.build(
            path=str(context),
            dockerfile=dockerfile,
            tag=tag,
            buildargs=args,
            labels={LABEL: step},
            rm=True,
            forcerm=True,
            pull=False,
        )
    except docker.errors.BuildError as exc:
        lines = [str(c.get("stream", c.get("error", ""))).rstrip() for c in exc.build_log]
        tail = "\n".join(ln for ln in lines if ln)[-1500:]
        raise ImageBuildError(step, f"{exc.msg}\n{tail}") from exc
    except docker.errors.APIError as exc:
        raise ImageBuildError(step, str(exc)) from exc


def find_standard_base(client: Any, allow_pull: bool) -> str | None:
    """A standard Debian image present in the engine (or pulled), if any."""
    for ref in STANDARD_BASES:
        if _has_image(client, ref):
            return ref
    if not allow_pull:
        return None
    for ref in STANDARD_BASES:
        repo, tag = ref.split(":")
        try:
            client.images.pull(repo, tag=tag)
        except docker.errors.APIError:
            continue  # no registry here: the normal case, so fall back quietly
        return ref
    return None


def _ensure_debootstrap() -> None:
    if shutil.which("debootstrap"):
        return
    # Install from the machine's own mirror; refresh the lists once if stale.
    apt = ["apt-get", "install", "-y", "-qq", "debootstrap"]
    try:
        _run("base: install debootstrap", apt)
    except ImageBuildError:
        _run("base: apt-get update", ["apt-get", "update", "-qq"])
        _run("base: install debootstrap", apt)


def _bootstrap_base(client: Any, tag: str) -> None:
    """debootstrap a minimal rootfs from the machine's apt mirror and import it."""
    step = "base: debootstrap"
    try:
        mirror = aptsources.mirror_for_suite(SUITE)
    except aptsources.AptSourcesError as exc:
        raise ImageBuildError(step, str(exc)) from exc
    _ensure_debootstrap()
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="base-", dir=CACHE_DIR))
    try:
        rootfs = work / "rootfs"
        include = ",".join(base_packages())
        argv = ["debootstrap", "--variant=minbase", f"--include={include}", SUITE, str(rootfs)]
        _run(step, [*argv, mirror])
        # Host keys are made per container at start; apt caches only add size.
        for junk in [*rootfs.glob("etc/ssh/ssh_host_*"), rootfs / "var/cache/apt/archives"]:
            shutil.rmtree(junk) if junk.is_dir() else junk.unlink()
        shutil.rmtree(rootfs / "var/lib/apt/lists", ignore_errors=True)
        tarball = work / "rootfs.tar"
        _run(
            "base: tar rootfs",
            ["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(tarball), "."],
        )
        repo, version = tag.split(":")
        changes = [f'LABEL {LABEL}="base"', 'CMD ["/bin/bash"]']
        try:
            client.api.import_image_from_file(
                str(tarball), repository=repo, tag=version, changes=changes
            )
        except docker.errors.APIError as exc:
            raise ImageBuildError("base: docker import", str(exc)) from exc
        if not _has_image(client, tag):
            raise ImageBuildError("base: docker import", f"{tag} is missing after the import")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _build_base_from_standard(client: Any, ref: str, tag: str) -> None:
    with tempfile.TemporaryDirectory(dir=_cache()) as ctx:
        pkgs = " ".join(base_packages())
        (Path(ctx) / "Dockerfile").write_text(
            f"FROM {ref}\nRUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
            f"--no-install-recommends {pkgs} && rm -rf /var/lib/apt/lists/* /etc/ssh/ssh_host_*\n"
        )
        docker_build(client, f"base: packages on {ref}", Path(ctx), "Dockerfile", tag)


def _cache() -> Path:
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    return CACHE_DIR


def _wheelhouse(step: str, name: str, reqs: list[str]) -> Path:
    """Wheels for `reqs`, built (or downloaded) once into images/cache/`name`."""
    house = _cache() / name
    if (house / ".complete").exists():
        return house
    shutil.rmtree(house, ignore_errors=True)
    _run(step, [sys.executable, "-m", "pip", "wheel", "-q", "-w", str(house), *reqs])
    (house / ".complete").touch()
    return house


def _build_deps(client: Any, base: str, tag: str) -> None:
    reqs = node_dependencies()
    house = _wheelhouse("deps: pip wheel", f"wheelhouse-{tag.split(':')[1]}", reqs)
    with tempfile.TemporaryDirectory(dir=_cache()) as ctx_name:
        ctx = Path(ctx_name)
        shutil.copytree(house, ctx / "wheels", ignore=shutil.ignore_patterns(".complete"))
        (ctx / "requirements.txt").write_text("\n".join(reqs) + "\n")
        for name in ("deps.Dockerfile", "entrypoint.sh", "sshd_faultline.conf"):
            shutil.copy(IMAGES_DIR / name, ctx / name)
        docker_build(client, "deps: venv", ctx, "deps.Dockerfile", tag, BASE=base)


def _build_top(client: Any, deps: str, tag: str, root: Path) -> None:
    # Only the build backend is needed here, so a fresh checkout whose deps
    # layer is already in docker downloads a few hundred KB, not every wheel.
    reqs = build_requirements()
    house = _wheelhouse("top: build backend", f"buildreqs-{_digest(reqs)}", reqs)
    with tempfile.TemporaryDirectory(dir=_cache()) as work_name:
        work = Path(work_name)
        # Build from a copy so the work tree gets no build/ or egg-info, and
        # offline: build isolation takes setuptools from the wheelhouse.
        src = snapshot_source(work / "src", root)
        ctx = work / "ctx"
        argv = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-index"]
        argv += ["--find-links", str(house), "-w", str(ctx / "dist"), str(src)]
        _run("top: faultline wheel", argv)
        shutil.copy(IMAGES_DIR / "ember.Dockerfile", ctx / "ember.Dockerfile")
        docker_build(client, "top: install faultline", ctx, "ember.Dockerfile", tag, DEPS=deps)


def build_image(
    *,
    allow_pull: bool = True,
    source_root: Path = ROOT,
    salt: str = "",
    tag_latest: bool = True,
    log: Callable[[str], None] = lambda _m: None,
) -> BuildReport:
    """Build (or find cached) the ember image from the source under
    `source_root`; return its tag and per-step times. Unless `tag_latest`
    is False (or a `salt` is given), also tag it `faultline-ember:latest`."""
    client = connect_docker(timeout_s=1800)
    report = BuildReport()
    base = base_tag(salt)

    def make_base(tag: str) -> None:
        ref = find_standard_base(client, allow_pull)
        if ref is None:
            log(f"no standard base image present: bootstrapping {tag} from Debian packages")
            _bootstrap_base(client, tag)
        else:
            _build_base_from_standard(client, ref, tag)

    deps = deps_tag(base)
    top = ember_tag(deps, source_root)
    steps = [
        ("base", base, make_base),
        ("deps", deps, lambda t: _build_deps(client, base, t)),
        ("top", top, lambda t: _build_top(client, deps, t, source_root)),
    ]
    for step, tag, make in steps:
        started = time.monotonic()
        if _has_image(client, tag):
            report.record(step, f"cached {tag}", started)
            continue
        log(f"building {step} layer {tag}")
        make(tag)
        report.record(step, f"built {tag}", started)
    if tag_latest and not salt:  # a salted (benchmark) chain must not replace it
        client.images.get(top).tag("faultline-ember", "latest")
        _prune_old_tops(client, keep=top)
    report.tag = top
    return report


def _prune_old_tops(client: Any, keep: str, min_age_s: float = 3600) -> None:
    """Untag earlier top layers (one per source change) so they do not pile
    up. Only those over an hour old: a younger one may belong to a run that
    is about to start its cluster; one a container uses is refused by docker."""
    for image in client.api.images(name="faultline-ember"):
        if time.time() - float(image.get("Created", 0)) < min_age_s:
            continue
        for tag in image.get("RepoTags") or []:
            if tag in (keep, "faultline-ember:latest"):
                continue
            try:
                client.images.remove(tag, noprune=False)
            except docker.errors.APIError:
                continue  # in use by a running cluster: it goes next time
    # Untagged leftovers of interrupted or concurrent builds of ours.
    with contextlib.suppress(docker.errors.APIError):  # another prune is already at it
        client.images.prune(filters={"dangling": True, "label": LABEL})


def main(argv: list[str] | None = None) -> int:
    """`python -m harness.images [--no-pull]`: build the image, print tags and times."""
    args = sys.argv[1:] if argv is None else argv
    started = time.monotonic()
    try:
        report = build_image(allow_pull="--no-pull" not in args, log=print)
    except (ImageBuildError, DockerUnavailableError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for step, action, seconds in report.steps:
        print(f"{step:5} {seconds:7.1f}s  {action}")
    print(f"image {report.tag} ready in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
