"""The NVML reader over readings recorded on a real H200 (scripts/record_nvml.py),
played back through pynvml's own functions, structures and error classes."""

from __future__ import annotations

import json

import pynvml
import pytest
from nvml_replay import FIXTURES, ReplayNvml

from gpudoctor.sources.nvml import NvmlReader, decode_reasons


def test_reads_what_nvidia_smi_shows_on_an_idle_h200() -> None:
    api = ReplayNvml("nvml_h200_idle.json")
    reader = NvmlReader(api)
    assert reader.available and reader.reason is None
    assert reader.driver_version == "580.159.04"
    (s,) = reader.read()
    assert s.name == "NVIDIA H200" and s.uuid and s.uuid.startswith("GPU-")
    assert s.compute_capability == (9, 0)
    assert s.util_gpu_pct == 0 and s.util_mem_pct == 0
    assert s.mem_total_bytes == 150754820096
    assert s.mem_used_bytes is not None and 0 < s.mem_used_bytes < s.mem_total_bytes
    assert s.power_limit_w == 700.0 and s.power_w is not None and 50 < s.power_w < 700
    assert s.temp_c is not None and 10 < s.temp_c < 90
    assert s.fan_pct is None  # NotSupported on this board
    assert s.sm_clock_mhz and s.mem_clock_mhz == 3201
    assert s.pcie_rx_bytes_per_s is not None and s.pcie_tx_bytes_per_s is not None
    assert s.clock_event_reasons == ("gpu-idle",)
    assert s.processes == ()  # NotFound from the per-process utilisation: nobody ran


def test_an_unsupported_field_is_never_asked_again() -> None:
    api = ReplayNvml("nvml_h200_idle.json")
    reader = NvmlReader(api)
    for _ in range(3):
        reader.read()
        api.tick()
    assert api.calls["nvmlDeviceGetFanSpeed"] == 1
    assert api.calls["nvmlDeviceGetUtilizationRates"] == 3
    # NotFound (no process samples yet) is not "unsupported": asked every time
    assert api.calls["nvmlDeviceGetProcessUtilization:0"] == 3


def test_a_job_starting_on_the_gpu_shows_in_the_readings() -> None:
    api = ReplayNvml("nvml_h200_load.json")
    reader = NvmlReader(api)
    samples = []
    for _ in range(len(api.recording["samples"])):
        samples.extend(reader.read())
        api.tick()
    assert samples[-1].util_gpu_pct and samples[-1].util_gpu_pct > 0
    assert samples[-1].power_w and samples[-1].power_w > samples[0].power_w  # type: ignore[operator]
    assert samples[-1].mem_used_bytes > samples[0].mem_used_bytes  # type: ignore[operator]
    assert samples[-1].clock_event_reasons == ()  # busy: not idle any more
    # a failing process query (not "unsupported") is asked again next time
    assert api.calls["nvmlDeviceGetComputeRunningProcesses"] == len(samples)


def test_process_list_in_pynvml_shapes() -> None:
    """Compute processes come back as pynvml.nvmlFriendlyObject (usedGpuMemory None when
    the driver cannot tell), utilisation as c_nvmlProcessUtilizationSample_t. These shapes
    are built here after nvidia-ml-py's own conversion (the busy-GPU recording lost its
    process list), with values from a real H200 run."""
    recording = json.loads((FIXTURES / "nvml_h200_idle.json").read_text())
    readings = recording["samples"][0][0]
    readings["nvmlDeviceGetComputeRunningProcesses"] = {"list": [
        {"friendly": {"pid": {"value": 650}, "usedGpuMemory": {"value": 545259520},
                      "gpuInstanceId": {"value": 0xFFFFFFFF}, "computeInstanceId": {"value": 0xFFFFFFFF}}},
        {"friendly": {"pid": {"value": 651}, "usedGpuMemory": {"value": None},
                      "gpuInstanceId": {"value": 0xFFFFFFFF}, "computeInstanceId": {"value": 0xFFFFFFFF}}},
    ]}  # fmt: skip
    readings["nvmlDeviceGetProcessUtilization:0"] = {"list": [
        {"struct": "c_nvmlProcessUtilizationSample_t", "fields": {
            "pid": {"value": 650}, "timeStamp": {"value": 1795980481014984}, "smUtil": {"value": 37},
            "memUtil": {"value": 12}, "encUtil": {"value": 0}, "decUtil": {"value": 0}}},
    ]}  # fmt: skip
    (s,) = NvmlReader(ReplayNvml(recording)).read()
    assert [(p.pid, p.mem_used_bytes, p.sm_util_pct) for p in s.processes] == [
        (650, 545259520, 37),
        (651, None, None),
    ]


def test_no_driver_is_cpu_only_mode_not_an_error() -> None:
    reader = NvmlReader()  # the real pynvml: this machine has no NVIDIA driver
    if reader.available:
        pytest.skip("this machine has an NVIDIA driver")  # pragma: no cover
    assert reader.read() == []
    assert reader.reason and "driver" in reader.reason


def test_driver_error_on_init_is_reported_not_raised() -> None:
    class Broken(ReplayNvml):
        def nvmlInit(self) -> None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    reader = NvmlReader(Broken("nvml_h200_idle.json"))
    assert not reader.available and "Driver Not Loaded" in (reader.reason or "")
    assert reader.read() == []


def test_clock_event_reason_bits() -> None:
    assert decode_reasons(0) == ()
    assert decode_reasons(0x1 | 0x40) == ("gpu-idle", "hw-thermal")
    assert decode_reasons(pynvml.nvmlClocksEventReasonSwPowerCap) == ("sw-power-cap",)
