"""A recorded session as a test fixture: the session's row and its records, gzipped
JSON, in the shape tests/conftest.py's load_recorded_session reads.

    python scripts/export_session.py STORE SESSION_ID OUT.json.gz
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import sys


def main() -> None:
    store, session_id, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    db = sqlite3.connect(store)
    db.row_factory = sqlite3.Row
    row = db.execute("SELECT * FROM sessions WHERE id=?", (session_id,)).fetchone()
    if row is None:
        sys.exit(f"export_session: no session {session_id} in {store}")
    records = [
        [kind, t, json.loads(data)]
        for kind, t, data in db.execute(
            "SELECT kind, t_mono_ns, data FROM records WHERE session_id=? ORDER BY id",
            (session_id,),
        )
    ]
    keep = ("command", "started_unix", "start_mono_ns", "gpu_reason", "end_mono_ns", "exit_json")
    data = {"session": {k: row[k] for k in keep}, "records": records}
    with open(out, "wb") as f:
        f.write(gzip.compress(json.dumps(data).encode(), mtime=0))


if __name__ == "__main__":
    main()
