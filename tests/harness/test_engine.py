"""A missing Docker engine is one precise error, never a traceback."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.backends.engine import DockerUnavailableError, connect_docker

ROOT = Path(__file__).resolve().parents[2]


def test_unreachable_engine_names_its_address(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pointing DOCKER_HOST at a missing socket raises an error naming it."""
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(DockerUnavailableError, match=r"unix:///nonexistent/docker\.sock"):
        connect_docker(timeout_s=5)


@pytest.mark.parametrize(
    "module_args", [["harness.images"], ["harness.backends.docker", "cleanup"]]
)
def test_cli_without_engine_prints_one_line_and_exits_2(module_args: list[str]) -> None:
    """The image builder and cleanup CLIs report a missing engine in one line."""
    env = {**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"}
    proc = subprocess.run(
        [sys.executable, "-m", *module_args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: cannot reach the Docker engine at unix:///nonexistent")
    assert len(proc.stderr.strip().splitlines()) == 1
