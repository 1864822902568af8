"""Golden interaction scripts (testdata/*.txt); REWRITE_GOLDEN=1 regenerates them."""

from pathlib import Path

import pytest

from .golden import parse, render, rewrite_requested, run_script

TESTDATA = Path(__file__).parent / "testdata"
SCRIPTS = sorted(TESTDATA.glob("*.txt"))


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_interaction_script_matches_its_golden_output(path):
    """Running the script's commands prints exactly the recorded output."""
    expected, actual = run_script(path)
    if rewrite_requested():
        path.write_text(actual)
        return
    assert actual == expected


def test_every_scenario_has_a_script():
    """The scenarios the core must document as scripts are all present."""
    wanted = {
        "add",
        "remove",
        "replace",
        "disjoint",
        "leader_removed",
        "catchup_retry",
        "ecatchup",
        "snapshot_catchup",
        "stepdown_joint",
    }
    assert wanted <= {p.stem for p in SCRIPTS}


def test_parse_and_render_round_trip():
    """A script survives parse+render unchanged, comments included."""
    text = "# hello\ncluster n1\n----\nok\n\nstatus\n----\nline 1\nline 2\n"
    assert render(parse(text)) == text


def test_missing_separator_is_reported_with_its_line():
    """A command without '----' is a clear error naming the line."""
    with pytest.raises(ValueError, match="line 2: expected '----'"):
        parse("status\nnot a separator\n")
