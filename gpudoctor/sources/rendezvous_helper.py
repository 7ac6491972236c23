"""The helper that speaks to a multi-node job's rendezvous store for its node's doctor
(rendezvous.py): `python -m gpudoctor.sources.rendezvous_helper HOST PORT PREFIX NODE`.

Reads this node's summaries from stdin (a JSON line each) and leaves the newest in the
store under PREFIX/node/SLOT (SLOT from a counter the doctors share, PREFIX/nodes);
every EXCHANGE_S prints the other nodes' newest as one JSON line {"connected", "nodes"}.
Ends when stdin closes (its doctor ended). Connection failures (the store not up yet,
or gone when the job ended) are retried quietly."""

from __future__ import annotations

import json
import select
import sys
import time
from datetime import timedelta
from typing import Any

EXCHANGE_S = 2.0
STORE_TIMEOUT_S = 3.0
MAX_NODES = 4096


def main(argv: list[str]) -> int:
    host, port, prefix, node = argv[0], int(argv[1]), argv[2], argv[3]
    from torch.distributed import TCPStore

    store: Any = None
    slot: int | None = None
    mine: bytes | None = None
    next_exchange = 0.0
    others: dict[str, Any] = {}
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], 0.5)
        if ready:
            line = sys.stdin.buffer.readline()
            if not line:
                return 0  # the doctor closed its end
            mine = _newest(line, mine)
        now = time.monotonic()
        if now < next_exchange:
            continue
        next_exchange = now + EXCHANGE_S
        try:
            if store is None:
                store = TCPStore(
                    host, port, is_master=False, wait_for_workers=False,
                    timeout=timedelta(seconds=STORE_TIMEOUT_S),
                )  # fmt: skip
                slot = int(store.add(prefix + "nodes", 1))
            if mine is not None:
                store.set(f"{prefix}node/{slot}", mine)
            others = _read_others(store, prefix, node) or others
            connected = True
        except Exception:  # noqa: BLE001 - the store not up yet, or gone: try again later
            store, slot, connected = None, None, False
        print(json.dumps({"connected": connected, "nodes": others}), flush=True)


def _newest(line: bytes, mine: bytes | None) -> bytes | None:
    try:
        json.loads(line)
    except ValueError:
        return mine
    return line.strip()


def _read_others(store: Any, prefix: str, node: str) -> dict[str, Any]:
    count = min(int(store.add(prefix + "nodes", 0)), MAX_NODES)
    keys = [f"{prefix}node/{i}" for i in range(1, count + 1)]
    out: dict[str, Any] = {}
    for key in keys:
        if not store.check([key]):
            continue
        try:
            message = json.loads(store.get(key))
        except ValueError:
            continue
        name = message.get("node") if isinstance(message, dict) else None
        if isinstance(name, str) and name != node:
            out[name] = {"host": message.get("host"), "ranks": message.get("ranks", [])}
    return out


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(0)
