#!/usr/bin/env bash
# Second GPU pass: NVML recorded under a busy GPU (for tests/fixtures), then the
# benchmarks on the GPU machine. Usage: bash scripts/gpu_bench.sh OUTDIR
set -u
out=${1:-/tmp/gpu-out}
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
{
  python3 bench/loop_job.py --device cuda --hidden 8192 --batch-size 16384 --steps 4000 > "$out/load.log" 2>&1 &
  load=$!
  sleep 10
  python3 scripts/record_nvml.py --samples 10 --interval 0.5 --out "$out/nvml_h200_load.json"
  kill $load; wait
  python3 bench/probe_overhead.py --device cuda --reps 3 --steps 300
  python3 bench/doctor_cost.py --seconds 30 --device cuda
} > "$out/bench.log" 2>&1
