#!/usr/bin/env bash
# The GPU timeline on a GPU (issue 42), and this session's fixes seen there, run on the
# device tool's machine after scripts/gpu_checks.sh:
#   bash scripts/gpu_timeline_checks.sh OUTDIR [UPSTREAM]
# 1. a launch-bound job (many_small_ops.py) under `run --profile-steps 5`: the capture
#    read live, launch-bound among the run's findings;
# 2. its remedy tried by `trial --apply torch-compile`;
# 3. the `gpu` test of host syncs (the per-detailed-step fix);
# 4. upstream scripts on the GPU again (bench/clients), when UPSTREAM is given.
set -u
out=${1:-/tmp/gpu-out}
up=${2:-}
res=$out/res
mkdir -p "$res"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
py=python3
{
  date
  t0=$SECONDS
  timeout 90 $py -m gpudoctor --store "$res/s.db" run --headless --profile-steps 5 \
    --report "$res/launch_bound.json" -- $py sample_jobs/many_small_ops.py --device cuda \
    --seconds 10 > "$res/launch_bound.log" 2>&1
  echo "live capture: rc=$? $((SECONDS - t0)) s"
  grep -E "^\s+\[|GPU timeline|trace:" "$res/launch_bound.log"
  t0=$SECONDS
  timeout 150 $py -m gpudoctor --store "$res/s.db" trial --apply torch-compile --steps 150 \
    --repeat 1 --extra-pairs 0 --report "$res/trial.json" -- \
    $py sample_jobs/many_small_ops.py --device cuda --steps 400 > "$res/trial.log" 2>&1
  echo "trial: rc=$? $((SECONDS - t0)) s"
  tail -n 12 "$res/trial.log"
  timeout 60 $py -m pytest -p no:cacheprovider -q -m gpu tests/test_gpu.py -k host_sync 2>&1 | tail -3
  if [ -n "$up" ]; then
    t0=$SECONDS
    timeout 170 $py bench/clients/run.py --repos "$up" --python "$(command -v $py)" \
      --device cuda --only chargpt,word_language_model,run_clm,lightning \
      --out "$res/clients.jsonl" --table "$res/clients.md" 2>&1 | cut -c1-700
    echo "clients: $((SECONDS - t0)) s"
    for d in /tmp/gpudoctor-clients-*/client-*; do
      mkdir -p "$res/clients/${d##*/}" && cp "$d"/*.out "$d"/*.err "$res/clients/${d##*/}/"
    done
  fi
  ls -la "$res/traces" 2>/dev/null
  date
} 2>&1 | tee "$out/gpu.log"
tar czf "$out/results.tgz" -C "$out" res
