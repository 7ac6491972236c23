#!/usr/bin/env bash
# GPU checks, run on a machine with an NVIDIA GPU (the device tool's machine):
#   bash scripts/gpu_checks.sh OUTDIR
# Records NVML readings (idle and under a CUDA job) for tests/fixtures, runs the GPU
# sample jobs under the doctor (reports kept), then the `gpu`-marked tests.
set -u
out=${1:-/tmp/gpu-out}
mkdir -p "$out/res"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
py=python3
doctor() { timeout 120 $py -m gpudoctor --store "$out/res/sessions.db" run --headless "$@"; echo "rc=$?"; }
{
  date; nvidia-smi -L; $py -c "import torch, pynvml, psutil; print('torch', torch.__version__, torch.version.cuda)"
  $py scripts/record_nvml.py --samples 3 --interval 0.3 --out "$out/res/nvml_idle.json"
  # NVML under load: the healthy job on the GPU while the recorder samples.
  ( $py sample_jobs/healthy.py --device cuda --seconds 12 --batch-size 4096 > "$out/res/load_job.log" 2>&1 & )
  sleep 6
  $py scripts/record_nvml.py --samples 8 --interval 0.5 --out "$out/res/nvml_load.json"
  sleep 8
  doctor --report "$out/res/healthy.json" -- $py sample_jobs/healthy.py --device cuda --seconds 10
  doctor --report "$out/res/healthy_big.json" -- $py sample_jobs/healthy.py --device cuda --seconds 10 --batch-size 8192
  doctor --report "$out/res/host_sync.json" -- $py sample_jobs/host_sync.py --device cuda --seconds 10
  doctor --report "$out/res/convnet.json" -- $py sample_jobs/convnet.py --device cuda --seconds 10
  doctor --report "$out/res/memory_pressure.json" -- $py sample_jobs/memory_pressure.py --device cuda --seconds 10
  doctor --report "$out/res/dataloader_bound.json" -- $py sample_jobs/dataloader_bound.py --device cuda --seconds 10
  doctor --report "$out/res/out_of_memory.json" -- $py sample_jobs/out_of_memory.py --device cuda
  doctor --report "$out/res/eval.json" -- $py sample_jobs/eval_without_no_grad.py --device cuda --seconds 8
  # two ranks on the GPU(s): NCCL when each rank has a GPU of its own, else gloo with
  # CUDA tensors; with NCCL the all-reduce is asynchronous to the host, so where the
  # fast ranks' wait shows (backward, or the next sync) is what this run is for
  doctor --report "$out/res/ddp_straggler.json" -- "$(dirname "$(command -v $py)")/torchrun" \
    --standalone --nproc_per_node 2 sample_jobs/ddp_straggler.py --device cuda
  $py -m pytest -p no:cacheprovider -q -m gpu tests/test_gpu.py 2>&1 | tail -20
  date
} > "$out/gpu.log" 2>&1
tar czf "$out/results.tgz" -C "$out" res
