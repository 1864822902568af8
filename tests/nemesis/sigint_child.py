"""A run that gets interrupted: brings up a cluster, injects a partition, a
slow link and a pause, prints READY, and waits to be signalled.

    python -m tests.nemesis.sigint_child docker NAME IMAGE
    python -m tests.nemesis.sigint_child ssh HOSTS_FILE

Used by test_sigint.py; all cleanup is `managed_cluster`'s, none is here.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

from harness.backends.base import Backend
from harness.backends.docker import DockerBackend
from harness.backends.lifecycle import Terminated, managed_cluster
from harness.backends.ssh import SshBackend
from nemesis import partition as p
from nemesis import process as proc
from nemesis.slow import is_netem_available, slow

SPEC = proc.ProcessSpec(pidfile="/run/faultline/sigint.pid", start_command="sleep 200000")


def main(argv: list[str]) -> int:
    """Run until signalled; exit 130 after cleaning up."""
    backend: Backend
    if argv[0] == "docker":
        backend = DockerBackend(argv[1], size=3, image=argv[2])
    else:
        backend = SshBackend.from_file(Path(argv[1]))
    try:
        with managed_cluster(backend) as (nodes, control):
            names = [n.name for n in nodes]
            proc.start(control, names, SPEC)
            p.partition(control, nodes, p.random_halves(names, random.Random(5)))
            delay = 20.0 if is_netem_available(control, names[0]) else None
            slow(control, nodes, {names[0]: names[1:]}, rate_kbit=256, delay_ms=delay)
            proc.pause(control, names, SPEC)
            print(f"READY {nodes[0].ssh.key_path}", flush=True)
            while True:
                time.sleep(0.1)
    except (KeyboardInterrupt, Terminated):
        print("CLEANED", flush=True)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
