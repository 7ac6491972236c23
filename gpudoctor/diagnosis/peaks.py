"""Peak dense throughput of NVIDIA GPUs, by the name NVML (or torch) gives, in TFLOP/s.

Dense figures: NVIDIA's datasheets print the tensor-core figures "with sparsity"
(2:4 structured sparsity, which training does not use) and mark them; the figures here
are those halved, as the datasheets' footnotes say. fp32 is the non-tensor-core rate;
tf32 is what fp32 matmuls and convolutions run at when TF32 is allowed. A dtype a GPU
has no tensor-core rate for (bf16 on a V100) runs at its fp32 rate.
"""

from __future__ import annotations

import re

# (pattern on the device name, figures, source). The first pattern that matches wins:
# the more specific names come first ("H100 NVL" before "H100").
GPU_PEAKS: tuple[tuple[str, dict[str, float], str], ...] = (
    (
        r"H200 NVL",
        {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5},
        "NVIDIA H200 datasheet (H200 NVL column), 2024",
    ),
    (
        r"H200",
        {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979.0},
        "NVIDIA H200 datasheet (H200 SXM column), 2024",
    ),
    (
        r"H100 NVL",
        {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5},
        "NVIDIA H100 datasheet (H100 NVL column), 2023",
    ),
    (
        r"H100 PCIe",
        {"fp32": 51.0, "tf32": 378.0, "bf16": 756.5, "fp16": 756.5, "fp8": 1513.0},
        "NVIDIA H100 datasheet (H100 PCIe column), 2023",
    ),
    (
        r"H100",
        {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979.0},
        "NVIDIA H100 datasheet (H100 SXM column), 2023",
    ),
    (
        r"A100",
        {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
        "NVIDIA A100 datasheet, 2021",
    ),
    (
        r"\bA10\b",
        {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0},
        "NVIDIA A10 datasheet, 2021",
    ),
    (
        r"\bA30\b",
        {"fp32": 10.3, "tf32": 82.0, "bf16": 165.0, "fp16": 165.0},
        "NVIDIA A30 datasheet, 2021",
    ),
    (
        r"L40S",
        {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05, "fp8": 733.0},
        "NVIDIA L40S datasheet, 2023",
    ),
    (
        r"\bL4\b",
        {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0, "fp8": 242.5},
        "NVIDIA L4 datasheet, 2023",
    ),
    (
        r"V100-SXM2|V100 SXM2",
        {"fp32": 15.7, "fp16": 125.0},
        "NVIDIA V100 datasheet (SXM2 column), 2020",
    ),
    (
        r"V100",
        {"fp32": 14.0, "fp16": 112.0},
        "NVIDIA V100 datasheet (PCIe column), 2020",
    ),
    (
        r"\bT4\b",
        {"fp32": 8.1, "fp16": 65.0},
        "NVIDIA T4 datasheet, 2019",
    ),
)

DTYPE_KEYS = {
    "float32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "float8_e4m3fnuz": "fp8",
    "float8_e5m2fnuz": "fp8",
}


def gpu_peaks(name: str) -> tuple[dict[str, float], str] | None:
    """The figures and their source for a device name, or None for one not listed."""
    for pattern, figures, source in GPU_PEAKS:
        if re.search(pattern, name):
            return figures, source
    return None


def peak_for(figures: dict[str, float], dtype: str, tf32: bool) -> tuple[float, str]:
    """A dtype's peak (TFLOP/s) and the figure's key: tf32 for fp32 work that TF32 runs
    (where the GPU has it); a dtype without its own figure at the fp32 rate."""
    key = DTYPE_KEYS.get(dtype, "fp32")
    if key == "fp32" and tf32 and "tf32" in figures:
        key = "tf32"
    if key not in figures:
        key = "fp32"
    return figures[key], key
