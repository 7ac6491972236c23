"""Which of the machine's GPUs (as NVML numbers them) a process of the job computes on.

A rank's GPU is not its LOCAL_RANK's NVML index in general: CUDA_VISIBLE_DEVICES=4,5,6,7
makes NVML's GPU 4 the job's `cuda:0`; a list of UUIDs or their prefixes reorders them
again; and CUDA numbers devices fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, where
NVML numbers them by PCI bus. So the device is found, in this order, by:
1. the UUID torch gives for the device the model is on (the probe's fact
   `cuda_device_uuid`): exact, whatever the ordering and the visible list;
2. NVML's own list of the processes on each GPU, when the process is on exactly one;
3. the device's ordinal (the model's `cuda:N`, else LOCAL_RANK, the torchrun
   convention of `torch.cuda.set_device(local_rank)`) looked up in the process's
   CUDA_VISIBLE_DEVICES (indices or UUID prefixes, as CUDA reads it: up to the first
   entry that names no device), or taken as the NVML index when that is unset.
A MIG instance (`MIG-...`) is not mapped to its parent GPU: no device is named.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpudoctor.model import GpuSample


def gpu_of(facts: Mapping[str, Any], pid: int, gpus: Sequence[GpuSample]) -> GpuSample | None:
    """The newest reading of the GPU that process `pid` (with its probe's `facts`) is
    on, or None when it cannot be told (no GPU, a CPU job, a MIG instance)."""
    latest = {g.index: g for g in gpus}  # readings come oldest first
    if not latest:
        return None
    uuid = facts.get("cuda_device_uuid")
    if isinstance(uuid, str) and uuid:
        for g in latest.values():
            if g.uuid and _bare(g.uuid) == _bare(uuid):
                return g
    on = [g for g in latest.values() if any(p.pid == pid for p in g.processes)]
    if len(on) == 1:
        return on[0]
    device = str(facts.get("device") or "")
    if device and not device.startswith("cuda"):
        return None  # the model is on the CPU (or another device)
    ordinal = _ordinal(device, facts.get("local_rank"))
    if ordinal is None:
        return None
    visible = facts.get("cuda_visible_devices")
    if visible is None:
        return latest.get(ordinal)
    entries = _visible(str(visible), latest.values())
    return entries[ordinal] if ordinal < len(entries) else None


def _ordinal(device: str, local_rank: object) -> int | None:
    _, colon, index = device.partition(":")
    if colon and index.isdigit():
        return int(index)
    try:
        return int(local_rank)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return None


def _visible(text: str, gpus: Any) -> list[GpuSample]:
    """CUDA_VISIBLE_DEVICES as CUDA reads it: the devices named, in order, up to the
    first entry that names none (an empty value hides them all)."""
    by_index = {g.index: g for g in gpus}
    out: list[GpuSample] = []
    for entry in (e.strip() for e in text.split(",")):
        if entry.isdigit():
            found = by_index.get(int(entry))
        elif entry.startswith("MIG-"):
            found = None
        else:
            matches = [
                g for g in by_index.values() if g.uuid and _bare(g.uuid).startswith(_bare(entry))
            ]
            found = matches[0] if len(matches) == 1 and entry else None
        if found is None:
            break
        out.append(found)
    return out


def _bare(uuid: str) -> str:
    """A GPU UUID without NVML's `GPU-` prefix (torch gives it bare), lower case."""
    text = uuid.strip().lower()
    return text[4:] if text.startswith("gpu-") else text
