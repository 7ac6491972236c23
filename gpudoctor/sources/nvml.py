"""GPU readings through NVML (nvidia-ml-py): what nvidia-smi's default view shows,
plus clock-event (throttle) reasons and per-process memory and utilisation.

`NvmlReader(api)` takes the `pynvml` module, or anything with the same functions,
constants and error class (the tests pass recorded readings through this seam). Each
field is asked once; one that answers NotSupported (or NoPermission) is never asked
again on that device. No driver is not an error: `available` is False and `reason`
says why.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpudoctor.model import GpuProcess, GpuSample

# nvml.h: nvmlClocksEventReason* (formerly nvmlClocksThrottleReason*) bit values.
CLOCK_EVENT_REASONS = {
    0x1: "gpu-idle",
    0x2: "applications-clocks",
    0x4: "sw-power-cap",
    0x8: "hw-slowdown",
    0x10: "sync-boost",
    0x20: "sw-thermal",
    0x40: "hw-thermal",
    0x80: "hw-power-brake",
    0x100: "display-clocks",
}

_NEVER_AGAIN_ERRORS = (
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_NO_PERMISSION",
    "NVML_ERROR_FUNCTION_NOT_FOUND",
)


def load_api() -> tuple[Any, str | None]:
    """The pynvml module, or None and the reason it cannot be used."""
    try:
        import pynvml
    except ImportError as exc:  # nvidia-ml-py missing: run CPU-only
        return None, f"nvidia-ml-py is not installed ({exc})"
    return pynvml, None


@dataclass
class _Device:
    index: int
    handle: Any
    name: str
    uuid: str | None
    compute_capability: tuple[int, int] | None
    unsupported: set[str] = field(default_factory=set)
    last_process_ts: int = 0


class NvmlReader:
    def __init__(self, api: Any = None) -> None:
        self.available = False
        self.reason: str | None = None
        self.driver_version: str | None = None
        self.devices: list[_Device] = []
        if api is None:
            api, self.reason = load_api()
            if api is None:
                return
        self.api = api
        never = tuple(getattr(api, name, None) for name in _NEVER_AGAIN_ERRORS)
        self._never_again = tuple(code for code in never if code is not None)
        try:
            api.nvmlInit()
        except api.NVMLError as exc:
            self.reason = f"no NVIDIA driver ({exc})"
            return
        except OSError as exc:
            self.reason = f"no NVIDIA driver ({exc})"
            return
        try:
            self.driver_version = _text(api.nvmlSystemGetDriverVersion())
        except api.NVMLError:
            self.driver_version = None
        try:
            count = api.nvmlDeviceGetCount()
            for index in range(count):
                handle = api.nvmlDeviceGetHandleByIndex(index)
                device = _Device(index, handle, "", None, None)
                device.name = (
                    _text(self._ask(device, "name", api.nvmlDeviceGetName, handle)) or "GPU"
                )
                device.uuid = _text(self._ask(device, "uuid", api.nvmlDeviceGetUUID, handle))
                cc = self._ask(device, "cc", api.nvmlDeviceGetCudaComputeCapability, handle)
                device.compute_capability = (int(cc[0]), int(cc[1])) if cc else None
                self.devices.append(device)
        except api.NVMLError as exc:
            self.reason = f"NVML could not list the GPUs ({exc})"
            return
        self.available = True

    def _ask(self, device: _Device, key: str, fn: Callable[..., Any], *args: Any) -> Any:
        """One NVML call: None when unsupported (and never asked again) or failing."""
        if key in device.unsupported:
            return None
        try:
            return fn(*args)
        except self.api.NVMLError as exc:
            if getattr(exc, "value", None) in self._never_again:
                device.unsupported.add(key)
            return None

    def read(self) -> list[GpuSample]:
        if not self.available:
            return []
        t = time.monotonic_ns()
        return [self._read_device(device, t) for device in self.devices]

    def _read_device(self, d: _Device, t: int) -> GpuSample:
        api, h = self.api, d.handle
        util = self._ask(d, "util", api.nvmlDeviceGetUtilizationRates, h)
        mem = self._ask(d, "mem", api.nvmlDeviceGetMemoryInfo, h)
        power = self._ask(d, "power", api.nvmlDeviceGetPowerUsage, h)
        limit = self._ask(d, "power_limit", api.nvmlDeviceGetEnforcedPowerLimit, h)
        temp = self._ask(d, "temp", api.nvmlDeviceGetTemperature, h, api.NVML_TEMPERATURE_GPU)
        fan = self._ask(d, "fan", api.nvmlDeviceGetFanSpeed, h)
        sm = self._ask(d, "sm_clock", api.nvmlDeviceGetClockInfo, h, api.NVML_CLOCK_SM)
        memclk = self._ask(d, "mem_clock", api.nvmlDeviceGetClockInfo, h, api.NVML_CLOCK_MEM)
        rx = self._ask(
            d, "pcie_rx", api.nvmlDeviceGetPcieThroughput, h, api.NVML_PCIE_UTIL_RX_BYTES
        )
        tx = self._ask(
            d, "pcie_tx", api.nvmlDeviceGetPcieThroughput, h, api.NVML_PCIE_UTIL_TX_BYTES
        )
        reasons_fn = (
            getattr(api, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or api.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        mask = self._ask(d, "clock_events", reasons_fn, h)
        return GpuSample(
            t_mono_ns=t,
            index=d.index,
            name=d.name,
            uuid=d.uuid,
            util_gpu_pct=int(util.gpu) if util is not None else None,
            util_mem_pct=int(util.memory) if util is not None else None,
            mem_used_bytes=int(mem.used) if mem is not None else None,
            mem_total_bytes=int(mem.total) if mem is not None else None,
            power_w=power / 1000.0 if power is not None else None,
            power_limit_w=limit / 1000.0 if limit is not None else None,
            temp_c=_int(temp),
            fan_pct=_int(fan),
            sm_clock_mhz=_int(sm),
            mem_clock_mhz=_int(memclk),
            pcie_rx_bytes_per_s=rx * 1024 if rx is not None else None,  # NVML gives KB/s
            pcie_tx_bytes_per_s=tx * 1024 if tx is not None else None,
            clock_event_reasons=decode_reasons(mask) if mask is not None else None,
            compute_capability=d.compute_capability,
            processes=self._processes(d),
        )

    def _processes(self, d: _Device) -> tuple[GpuProcess, ...]:
        api, h = self.api, d.handle
        running = self._ask(d, "procs", api.nvmlDeviceGetComputeRunningProcesses, h) or []
        sm_by_pid: dict[int, int] = {}
        if "proc_util" not in d.unsupported:
            try:
                samples = api.nvmlDeviceGetProcessUtilization(h, d.last_process_ts)
                for s in samples:
                    sm_by_pid[int(s.pid)] = int(s.smUtil)
                    d.last_process_ts = max(d.last_process_ts, int(s.timeStamp))
            except api.NVMLError as exc:
                # NOT_FOUND: no process used the GPU since the last reading.
                if getattr(exc, "value", None) in self._never_again:
                    d.unsupported.add("proc_util")
        seen: dict[int, GpuProcess] = {}
        for p in running:
            pid = int(p.pid)
            used = getattr(p, "usedGpuMemory", None)
            seen[pid] = GpuProcess(pid, int(used) if used is not None else None, sm_by_pid.get(pid))
        return tuple(seen.values())

    def close(self) -> None:
        if self.available:
            with contextlib.suppress(self.api.NVMLError):
                self.api.nvmlShutdown()
            self.available = False


def decode_reasons(mask: int) -> tuple[str, ...]:
    return tuple(name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit)


def _int(value: Any) -> int | None:
    return int(value) if value is not None else None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)
