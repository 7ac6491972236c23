"""The jobs the doctor follows: one it launches with the probe inside (launched.py),
one it watches from outside (watched.py), the one loop both run (source.py), and a
session another doctor records, followed from the store (attached.py)."""

from gpudoctor.jobs.attached import AttachedSession
from gpudoctor.jobs.launched import LaunchedJob, LaunchError, probe_env
from gpudoctor.jobs.source import JobSource, OnTick
from gpudoctor.jobs.watched import WatchedJob

__all__ = [
    "AttachedSession",
    "JobSource",
    "LaunchError",
    "LaunchedJob",
    "OnTick",
    "WatchedJob",
    "probe_env",
]
