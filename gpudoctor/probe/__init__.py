"""The in-process agent: runs INSIDE the user's training process.

It imports nothing of the rest of gpudoctor (the job may run in another Python
environment) and only the standard library until the job itself imports torch.
`boot/sitecustomize.py` loads this package under a private name and calls `start()`.
"""

from __future__ import annotations

ENV_SOCKET = "GPUDOCTOR_SOCKET"
ENV_BOOT = "GPUDOCTOR_BOOT"


def start() -> None:
    """Arm the probe: dormant until `torch` is imported. Never raises."""
    try:
        from . import agent

        agent.arm()
    except Exception as exc:  # the job must start whatever happens here
        import sys

        sys.stderr.write(f"gpudoctor probe: disabled ({type(exc).__name__}: {exc})\n")
