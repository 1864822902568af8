"""Builds the etcd node image offline, on the ember image's deps layer.

Theory of operation: the etcd image reuses `harness.images` for everything
but its own top layer. `images.build_image` makes sure the base and deps
layers exist (cached ones are found by tag, so this is quick when warm);
the etcd layer goes on the deps layer (sshd, entrypoint, the Python venv
that ember would use is simply unused), never on ember's source, so a source
change does not rebuild it. Debian bookworm's `etcd-server` and
`etcd-client` packages are fetched on the host with `apt-get download`
from the mirror the host's apt sources name (the only one reachable here)
into images/cache/etcd-debs-<version>/, then installed with dpkg inside the
build. The tag hashes the deps tag, the Dockerfile and the .deb files.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from harness import images
from harness.backends.engine import DockerUnavailableError, connect_docker

ETCD_PACKAGES = ("etcd-server", "etcd-client")
ETCD_VERSION = "3.4.23"  # bookworm's; the image build checks what it got
REPOSITORY = "faultline-etcd"
LATEST = f"{REPOSITORY}:latest"


def fetch_debs(log: Callable[[str], None] = lambda _m: None) -> Path:
    """The etcd .deb files, downloaded once into images/cache/etcd-debs-<version>/."""
    house = images.CACHE_DIR / f"etcd-debs-{ETCD_VERSION}"
    if (house / ".complete").exists():
        return house
    shutil.rmtree(house, ignore_errors=True)
    house.mkdir(parents=True)
    log(f"downloading {', '.join(ETCD_PACKAGES)} from the host's Debian mirror")
    argv = ["apt-get", "download", *ETCD_PACKAGES]
    try:
        images._run("etcd: apt-get download", argv, cwd=house, timeout_s=300)
    except images.ImageBuildError:
        images._run("etcd: apt-get update", ["apt-get", "update", "-qq"])
        images._run("etcd: apt-get download", argv, cwd=house, timeout_s=300)
    debs = sorted(p.name for p in house.glob("*.deb"))
    if len(debs) != len(ETCD_PACKAGES) or not all(ETCD_VERSION in d for d in debs):
        raise images.ImageBuildError(
            "etcd: apt-get download", f"expected {ETCD_VERSION} packages, got {debs or 'none'}"
        )
    (house / ".complete").touch()
    return house


def etcd_tag(deps: str, debs: Path) -> str:
    """Tag of the etcd layer on `deps` with the .deb files in `debs`."""
    parts: list[str | bytes] = [deps, (images.IMAGES_DIR / "etcd.Dockerfile").read_bytes()]
    for deb in sorted(debs.glob("*.deb")):
        parts += [deb.name, deb.read_bytes()]
    return f"{REPOSITORY}:{images._digest(parts)}"


def build_etcd_image(*, log: Callable[[str], None] = lambda _m: None) -> str:
    """Build (or find cached) the etcd image; tag it latest and return its tag."""
    images.build_image(log=log)  # base and deps (and ember's top, cheap when cached)
    deps = images.deps_tag(images.base_tag())
    debs = fetch_debs(log)
    tag = etcd_tag(deps, debs)
    client = connect_docker(timeout_s=1800)
    if not images._has_image(client, tag):
        log(f"building etcd layer {tag}")
        with tempfile.TemporaryDirectory(dir=images._cache()) as ctx_name:
            ctx = Path(ctx_name)
            shutil.copytree(debs, ctx / "debs", ignore=shutil.ignore_patterns(".complete"))
            shutil.copy(images.IMAGES_DIR / "etcd.Dockerfile", ctx / "etcd.Dockerfile")
            images.docker_build(client, "etcd: install", ctx, "etcd.Dockerfile", tag, DEPS=deps)
    repo, _version = tag.split(":")
    client.images.get(tag).tag(repo, "latest")
    return tag


def main() -> int:
    """`python -m harness.images_etcd`: build the etcd image, print its tag."""
    started = time.monotonic()
    try:
        tag = build_etcd_image(log=print)
    except (images.ImageBuildError, DockerUnavailableError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"image {tag} ready in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
