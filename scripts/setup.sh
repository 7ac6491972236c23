#!/usr/bin/env bash
# Set-up on a fresh machine: a virtual environment in .venv with gpudoctor (editable),
# its development tools, and the pinned CPU-or-CUDA torch the sample jobs need.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[dev]'
