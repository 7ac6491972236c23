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
# one test at a time by default: each test's job and doctor keep this 2-core machine's
# cores busy already; two at a time (GPUDOCTOR_TEST_WORKERS=2, pytest-xdist) has made
# tests that measure a job fail beside another busy test (issue 15); tried again on
# 2026-12-02 with the speed-measuring tests kept apart: the other 405 took 1226 s two at
# a time, little less than one at a time, and four that read a job's timing failed
workers="${GPUDOCTOR_TEST_WORKERS:-0}"
if [ "$workers" != 0 ]; then
    set -- -n "$workers" --dist worksteal "$@"
fi
python -m pytest "$@"
