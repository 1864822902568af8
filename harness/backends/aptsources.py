"""Finds the Debian mirror this machine already uses, from its apt sources.

The image bootstrap must use the mirror the machine is configured for (the
only one reachable here), so no host name is ever written into code. Both
formats are read: deb822 `.sources` stanzas (`Types: deb`, `URIs:`,
`Suites:`) and classic one-line `deb [options] URI suite components`.
"""

from __future__ import annotations

from pathlib import Path

APT_DIR = Path("/etc/apt")


class AptSourcesError(RuntimeError):
    """No usable Debian mirror was found in the apt sources."""


def _deb822_entries(text: str) -> list[tuple[str, list[str]]]:
    entries: list[tuple[str, list[str]]] = []
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if line[0].isspace() and key:  # a folded continuation line
                fields[key] += " " + line.strip()
                continue
            key, _, value = line.partition(":")
            key = key.strip().lower()
            fields[key] = value.strip()
        if "deb" not in fields.get("types", "").split():
            continue
        if fields.get("enabled", "yes").lower() == "no":
            continue
        suites = fields.get("suites", "").split()
        entries.extend((uri, suites) for uri in fields.get("uris", "").split())
    return entries


def _one_line_entries(text: str) -> list[tuple[str, list[str]]]:
    entries: list[tuple[str, list[str]]] = []
    for raw in text.splitlines():
        words = raw.split("#", 1)[0].split()
        if not words or words[0] != "deb":
            continue
        words = words[1:]
        if words and words[0].startswith("["):  # options like [arch=amd64 signed-by=...]
            while words and not words[0].endswith("]"):
                words = words[1:]
            words = words[1:]
        if len(words) >= 2:
            entries.append((words[0], [words[1]]))
    return entries


def source_entries(apt_dir: Path = APT_DIR) -> list[tuple[str, list[str]]]:
    """Every enabled `deb` (URI, suites) pair, in apt's reading order."""
    entries: list[tuple[str, list[str]]] = []
    main_list = apt_dir / "sources.list"
    if main_list.is_file():
        entries += _one_line_entries(main_list.read_text())
    parts = apt_dir / "sources.list.d"
    if parts.is_dir():
        for path in sorted(parts.iterdir()):
            if path.suffix == ".list":
                entries += _one_line_entries(path.read_text())
            elif path.suffix == ".sources":
                entries += _deb822_entries(path.read_text())
    return entries


def mirror_for_suite(suite: str, apt_dir: Path = APT_DIR) -> str:
    """The URI of the first http(s) source that serves `suite` itself."""
    entries = source_entries(apt_dir)
    for uri, suites in entries:
        if suite in suites and uri.startswith(("http://", "https://")):
            return uri
    seen = ", ".join(f"{u} ({' '.join(s)})" for u, s in entries) or "none"
    raise AptSourcesError(
        f"no http(s) apt source for suite '{suite}' in {apt_dir}/sources.list"
        f" or {apt_dir}/sources.list.d; sources seen: {seen}"
    )
