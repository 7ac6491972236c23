"""The in-process agent: runs INSIDE the user's training process.

It imports nothing of the rest of gpudoctor (the job may run in another Python
environment) and only the standard library until the job itself imports torch.
`boot/sitecustomize.py` loads this package under a private name and calls `start()`.
"""

from __future__ import annotations

ENV_SOCKET = "GPUDOCTOR_SOCKET"
ENV_BOOT = "GPUDOCTOR_BOOT"
ENV_DOCTOR_PID = "GPUDOCTOR_DOCTOR_PID"  # the doctor's own process
ENV_DOCTOR_START = "GPUDOCTOR_DOCTOR_START"  # and when it started (ticks since boot)
# Remedies the user asked the doctor to apply in-process (a trial's treatment), as JSON:
# {"dataloader": {"num_workers": 2, ...}, "cudnn_benchmark": true}. Unset: nothing changes.
ENV_OVERRIDES = "GPUDOCTOR_OVERRIDES"


def start() -> None:
    """Arm the probe: dormant until `torch` is imported. Never raises."""
    try:
        from . import agent

        agent.start()
    except Exception as exc:  # the job must start whatever happens here
        import sys

        sys.stderr.write(f"gpudoctor probe: disabled ({type(exc).__name__}: {exc})\n")


def attach(settings: dict[str, object]) -> str:
    """Join a process already running (`gpudoctor watch --inject`, injected.py): what
    became of it ("attached", or why not). Never raises."""
    try:
        from . import injected

        return injected.attach(settings)
    except Exception as exc:
        return f"error: {type(exc).__name__}: {exc}"
