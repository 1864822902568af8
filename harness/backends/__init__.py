"""Cluster backends: where the nodes under test live and how to reach them.

A backend brings a cluster up, reports its nodes as `NodeHandle`s (name,
address on the cluster network, SSH target), and tears it down. `docker`
builds containers on a private network; `ssh` uses hosts a user already has.
"""

from harness.backends.base import Backend, NodeHandle, NoopBackend, SshTarget

__all__ = ["Backend", "NodeHandle", "NoopBackend", "SshTarget"]
