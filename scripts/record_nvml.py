"""Record raw NVML readings, in the shapes nvidia-ml-py returns, for the tests.

Run on a machine with an NVIDIA GPU:
    python3 scripts/record_nvml.py --samples 5 --interval 0.5 --out tests/fixtures/nvml_h200_idle.json
Each call the live reader makes is recorded per device and per sample, as a value,
a ctypes structure (class name and fields), a list of structures, or an NVML error
code. tests/nvml_replay.py plays a recording back through the same functions.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import time
from typing import Any

import pynvml

# (name, extra arguments as pynvml constant names) for every call NvmlReader makes.
DEVICE_CALLS: list[tuple[str, tuple[str, ...]]] = [
    ("nvmlDeviceGetName", ()),
    ("nvmlDeviceGetUUID", ()),
    ("nvmlDeviceGetCudaComputeCapability", ()),
    ("nvmlDeviceGetUtilizationRates", ()),
    ("nvmlDeviceGetMemoryInfo", ()),
    ("nvmlDeviceGetPowerUsage", ()),
    ("nvmlDeviceGetEnforcedPowerLimit", ()),
    ("nvmlDeviceGetTemperature", ("NVML_TEMPERATURE_GPU",)),
    ("nvmlDeviceGetFanSpeed", ()),
    ("nvmlDeviceGetClockInfo", ("NVML_CLOCK_SM",)),
    ("nvmlDeviceGetClockInfo", ("NVML_CLOCK_MEM",)),
    ("nvmlDeviceGetPcieThroughput", ("NVML_PCIE_UTIL_RX_BYTES",)),
    ("nvmlDeviceGetPcieThroughput", ("NVML_PCIE_UTIL_TX_BYTES",)),
    ("nvmlDeviceGetCurrentClocksEventReasons", ()),
    ("nvmlDeviceGetCurrentClocksThrottleReasons", ()),
    ("nvmlDeviceGetComputeRunningProcesses", ()),
    ("nvmlDeviceGetProcessUtilization", ("0",)),
]


def key(name: str, consts: tuple[str, ...]) -> str:
    return name + "".join(f":{c}" for c in consts)


def encode(value: Any) -> Any:
    if isinstance(value, ctypes.Structure):
        fields = {}
        for field in value._fields_:
            fields[field[0]] = encode(getattr(value, field[0]))
        return {"struct": type(value).__name__, "fields": fields}
    if isinstance(value, pynvml.nvmlFriendlyObject):
        return {"friendly": {k: encode(v) for k, v in vars(value).items()}}
    if isinstance(value, (list, tuple)):
        return {"list" if isinstance(value, list) else "tuple": [encode(v) for v in value]}
    if isinstance(value, bytes):
        return {"bytes": value.decode(errors="replace")}
    if isinstance(value, (int, float, str)) or value is None:
        return {"value": value}
    return {"repr": repr(value)}


def call(fn: Any, *args: Any) -> Any:
    try:
        return encode(fn(*args))
    except pynvml.NVMLError as exc:
        return {"error": exc.value, "class": type(exc).__name__, "text": str(exc)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--samples", type=int, default=5)
    p.add_argument("--interval", type=float, default=0.5)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    pynvml.nvmlInit()
    count = pynvml.nvmlDeviceGetCount()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    record: dict[str, Any] = {
        "nvidia_ml_py": getattr(pynvml, "__version__", None),
        "driver": call(pynvml.nvmlSystemGetDriverVersion),
        "device_count": count,
        "samples": [],
    }
    for _ in range(args.samples):
        sample = []
        for handle in handles:
            readings = {}
            for name, consts in DEVICE_CALLS:
                fn = getattr(pynvml, name, None)
                if fn is None:
                    readings[key(name, consts)] = {"missing": True}
                    continue
                extra = [int(c) if c.isdigit() else getattr(pynvml, c) for c in consts]
                readings[key(name, consts)] = call(fn, handle, *extra)
            sample.append(readings)
        record["samples"].append(sample)
        time.sleep(args.interval)
    pynvml.nvmlShutdown()
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
