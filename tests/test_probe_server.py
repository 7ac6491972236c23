"""The doctor's side of the probe socket: real datagrams, garbage included."""

from __future__ import annotations

import json
import math
import socket
from pathlib import Path

from gpudoctor.sources.probe_server import ProbeServer, parse

GOOD = {"v": 1, "pid": 5, "steps": [[0, 10, 10, 1, 0, 2, 3, 1, 1, 32, 0, 0]]}


def test_garbage_is_counted_and_dropped(tmp_path: Path) -> None:
    server = ProbeServer(str(tmp_path / "p.sock"))
    sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    for payload in (
        b"\x00\xff garbage",
        b"[1, 2, 3]",
        b'{"v": 1}',
        json.dumps({**GOOD, "steps": [[1, 2, "three"]]}).encode(),
        json.dumps({**GOOD, "steps": [[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, "x"]]}).encode(),
        json.dumps({**GOOD, "facts": [1]}).encode(),
        json.dumps(GOOD).encode(),
    ):
        sender.sendto(payload, server.path)
    received = server.drain()
    assert [m for m, _ in received] == [GOOD]
    assert server.bad_messages == 6
    server.close()
    assert not Path(server.path).exists()


def test_parse_accepts_a_message_without_steps() -> None:
    assert parse(json.dumps({"v": 1, "pid": 3, "facts": {"a": 1}}).encode()) is not None
    assert parse(json.dumps({"v": 2, "pid": 3}).encode()) is None


def test_a_message_with_a_nan_loss_is_read_as_python_writes_it() -> None:
    """The probe's json.dumps writes a NaN loss as NaN, which orjson refuses: the message,
    its step rows with it, is still read (by the standard library), NaN and all."""
    text = json.dumps({**GOOD, "facts": {"losses": [float("nan"), 1.5]}}).encode()
    assert b"NaN" in text
    message = parse(text)
    assert message is not None and message["steps"] == GOOD["steps"]
    assert math.isnan(message["facts"]["losses"][0]) and message["facts"]["losses"][1] == 1.5
    # what is not JSON at all is still refused, whichever decoder tried last
    for bad in (b'{"v": 1, "pid": 5, "steps": [[0, 1', b"\xff\xfe{}", b"{'v': 1}"):
        assert parse(bad) is None
