#!/usr/bin/env bash
# The tests: set up, then lint, types, import seams and the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The TUI's terminal test drives the real app in tmux (a Debian package).
if ! command -v tmux >/dev/null; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && apt-get install -y -qq tmux >/dev/null
    else
        echo "scripts/test.sh: tmux is needed for the terminal test: sudo apt-get install tmux" >&2
        exit 1
    fi
fi
export PATH="$PWD/.venv/bin:$PATH"
ruff check .
ruff format --check .
mypy
lint-imports
python -m pytest "$@"
