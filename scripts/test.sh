#!/usr/bin/env bash
# The tests: set up, then lint, types, import seams and the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
ruff check .
ruff format --check .
mypy
lint-imports
python -m pytest "$@"
