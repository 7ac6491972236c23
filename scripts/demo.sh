#!/usr/bin/env bash
# The main job: set up, then run a DataLoader-bound sample job under the doctor,
# headless, and write its report to report.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/gpudoctor run --headless --report report.md -- .venv/bin/python sample_jobs/dataloader_bound.py
