"""ember/raft is sans-IO: no asyncio, socket, time, threading, nor global random."""

import ast
from pathlib import Path

import pytest

import ember.raft

FORBIDDEN_MODULES = {
    "asyncio",
    "socket",
    "time",
    "threading",
    "selectors",
    "multiprocessing",
    "concurrent",
    "subprocess",
    "datetime",
}
RAFT_DIR = Path(ember.raft.__file__).parent


def violations(source: str) -> list[str]:
    """Every forbidden import or module-level random call in `source`."""
    found = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FORBIDDEN_MODULES:
                    found.append(f"line {node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            root = node.module.split(".")[0]
            if root in FORBIDDEN_MODULES:
                found.append(f"line {node.lineno}: from {node.module} import ...")
            if root == "random":
                bad = [a.name for a in node.names if a.name != "Random"]
                if bad:
                    found.append(f"line {node.lineno}: from random import {', '.join(bad)}")
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "random"
            and node.attr != "Random"
        ):
            found.append(f"line {node.lineno}: random.{node.attr} (the global RNG)")
    return found


@pytest.mark.parametrize("path", sorted(RAFT_DIR.glob("*.py")), ids=lambda p: p.name)
def test_raft_module_does_no_io_and_uses_only_an_injected_rng(path):
    """No module of ember/raft imports IO/time/thread modules or calls random.<fn>()."""
    assert violations(path.read_text()) == []


def test_scanner_catches_each_kind_of_violation():
    """The scan itself flags the forbidden forms (so the test above can fail)."""
    bad = (
        "import asyncio\nimport time as t\nfrom socket import socket\n"
        "from threading import Lock\nfrom random import randint\n"
        "import random\nx = random.random()\ny = random.Random(1)\n"
    )
    found = violations(bad)
    assert len(found) == 6
    assert any("random.random" in f for f in found)
    assert not any("Random" in f and "random.Random" in f for f in found)


def test_the_package_has_modules_to_scan():
    """The scan covers the real package (node, log, quorum ...), not an empty glob."""
    names = {p.name for p in RAFT_DIR.glob("*.py")}
    assert {"node.py", "log.py", "quorum.py", "confchange.py", "changepeers.py"} <= names
