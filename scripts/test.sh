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
# Two tests at a time (pytest-xdist): each test's job then runs beside another test's, as
# it would beside another user's busy process on a shared server (issue 15). Then, one
# at a time, the tests marked `serial`: those that measure a job's speed against another
# run of it, or bring busy processes of their own. GPUDOCTOR_TEST_WORKERS=0: all alone.
workers="${GPUDOCTOR_TEST_WORKERS:-2}"
together=0
python -m pytest -m "not gpu and not serial" -n "$workers" --dist worksteal "$@" || together=$?
alone=0
python -m pytest -m "serial and not gpu" "$@" || alone=$?
# 5: no test collected, which is fine for one of the two (a file asked for, say)
for rc in "$together" "$alone"; do
    if [ "$rc" != 0 ] && [ "$rc" != 5 ]; then exit "$rc"; fi
done
if [ "$together" = 5 ] && [ "$alone" = 5 ]; then exit 5; fi
