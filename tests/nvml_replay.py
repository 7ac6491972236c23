"""Plays back NVML readings recorded by scripts/record_nvml.py through the functions,
constants and error class of the real `pynvml` module: the live reader's interface.

Structures come back as the same ctypes classes pynvml returns, process lists as
pynvml's nvmlFriendlyObject, failures as the NVMLError subclass for the recorded code.
`tick()` moves to the next recorded sample (the last one repeats).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pynvml

FIXTURES = Path(__file__).parent / "fixtures"


def decode(item: dict[str, Any]) -> Any:
    if "unrecorded" in item:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
    if "error" in item:
        raise pynvml.NVMLError(item["error"])
    if "value" in item:
        return item["value"]
    if "bytes" in item:
        return item["bytes"].encode()
    if "struct" in item:
        struct = getattr(pynvml, item["struct"])()
        for name, value in item["fields"].items():
            setattr(struct, name, decode(value))
        return struct
    if "friendly" in item:
        return pynvml.nvmlFriendlyObject({k: decode(v) for k, v in item["friendly"].items()})
    if "list" in item:
        return [decode(v) for v in item["list"]]
    if "tuple" in item:
        return tuple(decode(v) for v in item["tuple"])
    raise ValueError(f"cannot replay {item}")


class ReplayNvml:
    """A stand-in for the pynvml module, over one recording."""

    NVMLError = pynvml.NVMLError

    def __init__(self, recording: str | dict[str, Any]) -> None:
        self.recording: dict[str, Any] = (
            json.loads((FIXTURES / recording).read_text())
            if isinstance(recording, str)
            else recording
        )
        self.sample = 0
        self.calls: Counter[str] = Counter()
        self.initialised = False

    def __getattr__(self, name: str) -> Any:
        if name.startswith("NVML_") or name.startswith("nvmlClocks"):
            return getattr(pynvml, name)  # the real constants
        if name.startswith("nvmlDevice"):
            return lambda handle, *args: self._device_call(name, handle, *args)
        raise AttributeError(name)

    def tick(self) -> None:
        self.sample = min(self.sample + 1, len(self.recording["samples"]) - 1)

    def nvmlInit(self) -> None:
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> Any:
        return decode(self.recording["driver"])

    def nvmlDeviceGetCount(self) -> int:
        return int(self.recording["device_count"])

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def _device_call(self, name: str, handle: int, *args: Any) -> Any:
        readings = self.recording["samples"][self.sample][handle]
        key = name
        if args:
            const = _const_name(name, args[0])
            key = f"{name}:{const}"
        self.calls[key] += 1
        item = readings.get(key)
        if item is None or item.get("missing"):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return decode(item)


def _const_name(function: str, value: Any) -> str:
    if function == "nvmlDeviceGetProcessUtilization":
        return "0"  # recorded with lastSeenTimeStamp=0: everything in the driver's buffer
    prefixes = {
        "nvmlDeviceGetTemperature": "NVML_TEMPERATURE_",
        "nvmlDeviceGetClockInfo": "NVML_CLOCK_",
        "nvmlDeviceGetPcieThroughput": "NVML_PCIE_UTIL_",
    }
    prefix = prefixes[function]
    for const in dir(pynvml):
        wanted = function != "nvmlDeviceGetClockInfo" or const in (
            "NVML_CLOCK_SM",
            "NVML_CLOCK_MEM",
        )
        if wanted and const.startswith(prefix) and getattr(pynvml, const) == value:
            return const
    raise KeyError((function, value))
