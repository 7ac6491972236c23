#!/usr/bin/env bash
# The tests: set up, then lint, types, import seams and the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The TUI's terminal tests drive the real app in tmux, the metrics test has a real
# Prometheus scrape it, the HTML report is opened in a real headless chromium (Debian
# packages).
missing=""
command -v tmux >/dev/null || missing="$missing tmux"
command -v prometheus >/dev/null || missing="$missing prometheus"
command -v chromium >/dev/null || missing="$missing chromium"
if [ -n "$missing" ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && apt-get install -y -qq $missing >/dev/null
    else
        echo "scripts/test.sh: needed for the tests:$missing (sudo apt-get install$missing)" >&2
        exit 1
    fi
fi
export PATH="$PWD/.venv/bin:$PATH"
ruff check .
ruff format --check .
mypy
lint-imports
# Two tests at a time (pytest-xdist), then those that measure a job (marked `quiet`,
# tests/conftest.py) one at a time: beside another busy test, findings and tries that
# depend on the job's own timing failed once (issue 15). GPUDOCTOR_TEST_WORKERS=0 runs
# everything one at a time.
workers="${GPUDOCTOR_TEST_WORKERS:-2}"
if [ "$workers" = 0 ]; then
    python -m pytest "$@"
else
    python -m pytest -m "not gpu and not quiet" -n "$workers" --dist worksteal "$@"
    python -m pytest -m "quiet and not gpu" "$@"
fi
