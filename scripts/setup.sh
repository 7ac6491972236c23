#!/usr/bin/env bash
# Set-up on a fresh machine: a virtual environment in .venv with gpudoctor (editable),
# its development tools, and the pinned CPU-or-CUDA torch the sample jobs need.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[dev]'
# Holistic Trace Analysis, the tests' oracle for `gpudoctor trace` (tests/test_gpu_timeline.py),
# without the notebook it declares (jupyterlab: it imports none of it)
.venv/bin/python -m pip install --quiet --no-deps holistictraceanalysis==0.5.0
# The bytecode of gpudoctor, the sample jobs' helper and the tests' own modules, compiled
# once: where PYTHONDONTWRITEBYTECODE is set (as on some CI machines) Python would
# otherwise compile each module again in every doctor and job process (0.1 s of CPU a
# doctor's start-up; the tests start a few thousand). Python reads these whatever that
# variable says, and compiles again in memory any source edited since.
.venv/bin/python -m compileall -q gpudoctor sample_jobs tests >/dev/null
