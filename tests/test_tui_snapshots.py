"""What the screens look like, compared with approved snapshots (SVG files under
tests/__snapshots__/; after an intended change, review and refresh them with
`pytest tests/test_tui_snapshots.py --snapshot-update`). The data is a session recorded
on an H200, replayed: the same frames every time (no clock in the header, no cursor
blinking in these screens)."""

from __future__ import annotations

from typing import Any

from conftest import load_recorded_session

from gpudoctor.tui.app import make_replay_app


def replay() -> Any:
    return make_replay_app(load_recorded_session("dataloader_bound"), 7, "en")


def test_dashboard_at_80x24(snap_compare: Any) -> None:
    assert snap_compare(replay(), terminal_size=(80, 24))


def test_dashboard_at_160x48(snap_compare: Any) -> None:
    assert snap_compare(replay(), terminal_size=(160, 48))


def test_finding_screen_at_80x24(snap_compare: Any) -> None:
    assert snap_compare(replay(), press=["enter"], terminal_size=(80, 24))


def test_help_at_80x24(snap_compare: Any) -> None:
    assert snap_compare(replay(), press=["question_mark"], terminal_size=(80, 24))


def test_history_at_160x48(snap_compare: Any) -> None:
    """h: every plot of the run (GPU plots too: the session ran on an H200), the
    markers numbered on the plots and named below them, the replay's position."""
    assert snap_compare(replay(), press=["h"], terminal_size=(160, 48))


def test_history_at_80x24(snap_compare: Any) -> None:
    """A small terminal: one plot a row, scrolled, the footer's keys still there."""
    assert snap_compare(replay(), press=["h"], terminal_size=(80, 24))
