"""Connecting to the Docker engine with one clear error when it is not there."""

from __future__ import annotations

import os
from typing import Any

import docker
import docker.errors


class DockerUnavailableError(RuntimeError):
    """The Docker engine cannot be reached (not installed, not running, no permission)."""


def engine_address() -> str:
    """The address the Docker SDK will use, for messages."""
    return os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")


def connect_docker(timeout_s: int = 120) -> Any:
    """A `docker.DockerClient` that has answered a ping, else `DockerUnavailableError`."""
    try:
        client = docker.from_env(timeout=timeout_s)
        client.ping()
    except docker.errors.DockerException as exc:
        raise DockerUnavailableError(
            f"cannot reach the Docker engine at {engine_address()}: {_reason(exc)}"
        ) from exc
    return client


def _reason(exc: BaseException) -> str:
    # The SDK nests the socket error several causes deep; the innermost one
    # ("No such file or directory", "Permission denied") is what a user can act on.
    inner: BaseException = exc
    while inner.__cause__ is not None or inner.__context__ is not None:
        inner = inner.__cause__ or inner.__context__  # type: ignore[assignment]
    text = str(inner) or type(inner).__name__
    return text.splitlines()[0][:300]
