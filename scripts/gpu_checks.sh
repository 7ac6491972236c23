#!/usr/bin/env bash
# GPU checks, run on a machine with an NVIDIA GPU (the device tool's machine):
#   bash scripts/gpu_checks.sh OUTDIR [UPSTREAM]
# 1. the GPU sample jobs under the doctor, reports kept; four of them with a profiler
#    capture whose Chrome trace is kept (tiny kernels, fp32 GEMMs, pageable copies, host
#    syncs: the GPU-timeline fixtures of issue 42);
# 2. upstream training scripts on the GPU, plain and under the doctor (bench/clients,
#    UPSTREAM the folder that holds their repositories), when UPSTREAM is given;
# 3. the `gpu`-marked tests.
# Everything lands in OUTDIR/res, packed as OUTDIR/results.tgz; the log in OUTDIR/gpu.log.
set -u
out=${1:-/tmp/gpu-out}
up=${2:-}
mkdir -p "$out/res"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
py=python3
res=$out/res
doctor() {
  local name=$1; shift
  timeout 150 $py -m gpudoctor --store "$res/sessions.db" run --headless \
    --report "$res/$name.json" "$@" > "$res/$name.log" 2>&1
  echo "$name: rc=$? $(tail -n 4 "$res/$name.log" | tr '\n' ' ' | cut -c1-400)"
}
trace() {  # NAME JOB ARGS...: a doctored run with 5 steps captured, the trace kept
  local name=$1 job=$2; shift 2
  doctor "$name" --profile-steps 5 --profile-trace "$res/trace_$name.json.gz" \
    -- $py "sample_jobs/$job" --device cuda "$@"
}
{
  date; nvidia-smi -L
  $py -c "import torch, pynvml, psutil; print('torch', torch.__version__, torch.version.cuda)"
  t0=$SECONDS
  trace many_small_ops many_small_ops.py --seconds 8
  trace fp32_gemm healthy.py --seconds 8 --batch-size 8192
  trace pageable_copies dataloader_bound.py --seconds 8
  trace host_sync host_sync.py --seconds 8
  doctor eval -- $py sample_jobs/eval_without_no_grad.py --device cuda --seconds 8
  echo "sample jobs: $((SECONDS - t0)) s"
  if [ -n "$up" ]; then
    t0=$SECONDS
    timeout 240 $py bench/clients/run.py --repos "$up" --python "$(command -v $py)" \
      --device cuda --only nanoGPT,chargpt,word_language_model,run_clm,lightning \
      --out "$res/clients.jsonl" --table "$res/clients.md" 2>&1 | cut -c1-600
    for d in /tmp/gpudoctor-clients-*/client-*; do  # each client's outputs, for a diff
      mkdir -p "$res/clients/${d##*/}" && cp "$d"/*.out "$d"/*.err "$res/clients/${d##*/}/"
    done
    echo "clients: $((SECONDS - t0)) s"
  fi
  timeout 120 $py -m pytest -p no:cacheprovider -q -m gpu tests/test_gpu.py 2>&1 | tail -15
  ls -la "$res"; date
} 2>&1 | tee "$out/gpu.log"
tar czf "$out/results.tgz" -C "$out" res
