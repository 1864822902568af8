"""The databases faultline can test, by `--db` name.

A system is one module implementing `harness.db.DB` (install, start, stop,
kill, pause, resume, wait_healthy, status, groups, leaders, bootstrap,
urls, set_failpoint, audit_path, collect) plus, for the runner, an image
and its client workers: see docs/adding-a-system.md. `DBS` names them
for `faultline run --db`.
"""

from __future__ import annotations

from collections.abc import Callable

DBS = ("ember", "etcd")


def image_for(name: str, log: Callable[[str], None]) -> str | None:
    """The docker image a db other than ember runs in (None: the runner's ember image)."""
    if name == "etcd":
        from harness.images_etcd import LATEST, build_etcd_image

        log("building the etcd image (cached layers are reused)")
        log(f"image {build_etcd_image(log=log)} (run as {LATEST})")
        return LATEST
    return None
