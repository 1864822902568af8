"""The Debian mirror is read from apt's own sources, in both formats."""

from pathlib import Path

import pytest

from harness.backends.aptsources import AptSourcesError, mirror_for_suite, source_entries


def _apt_dir(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "sources.list.d").mkdir()
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def test_deb822_sources_give_the_mirror_of_the_suite(tmp_path: Path) -> None:
    """A deb822 stanza naming the suite yields its URI; the security stanza is skipped."""
    apt = _apt_dir(
        tmp_path,
        {
            "sources.list.d/debian.sources": (
                "Types: deb\n# a comment\nURIs: http://mirror.example/debian\n"
                "Suites: bookworm bookworm-updates\nComponents: main\n\n"
                "Types: deb\nURIs: http://security.example/debian-security\n"
                "Suites: bookworm-security\nComponents: main\n"
            )
        },
    )
    assert mirror_for_suite("bookworm", apt) == "http://mirror.example/debian"
    assert mirror_for_suite("bookworm-security", apt) == "http://security.example/debian-security"


def test_one_line_sources_with_options_are_parsed(tmp_path: Path) -> None:
    """Classic lines, with [options] and deb-src lines, give the deb URI."""
    apt = _apt_dir(
        tmp_path,
        {
            "sources.list": (
                "# deb http://commented.example/debian bookworm main\n"
                "deb-src http://src.example/debian bookworm main\n"
                "deb [arch=amd64 signed-by=/k.gpg] https://one.example/debian bookworm main\n"
            )
        },
    )
    assert mirror_for_suite("bookworm", apt) == "https://one.example/debian"


def test_disabled_and_src_only_stanzas_are_ignored(tmp_path: Path) -> None:
    """`Enabled: no` and `Types: deb-src` stanzas contribute nothing."""
    apt = _apt_dir(
        tmp_path,
        {
            "sources.list.d/x.sources": (
                "Types: deb\nURIs: http://off.example/d\nSuites: bookworm\nEnabled: no\n\n"
                "Types: deb-src\nURIs: http://src.example/d\nSuites: bookworm\n"
            )
        },
    )
    assert source_entries(apt) == []


def test_missing_suite_is_one_clear_error(tmp_path: Path) -> None:
    """No source for the suite: the error names the suite and what was seen."""
    apt = _apt_dir(tmp_path, {"sources.list": "deb http://m.example/debian bullseye main\n"})
    with pytest.raises(AptSourcesError, match=r"suite 'bookworm'.*m\.example/debian \(bullseye\)"):
        mirror_for_suite("bookworm", apt)


def test_this_machine_has_a_mirror_for_the_image_suite() -> None:
    """The machine the image is built on names an http(s) mirror for bookworm."""
    if not Path("/etc/apt").is_dir():
        pytest.skip("not a Debian machine")
    assert mirror_for_suite("bookworm").startswith(("http://", "https://"))
