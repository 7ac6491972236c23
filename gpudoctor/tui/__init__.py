"""The Textual app: renders the snapshots a session or a replay hands it."""
