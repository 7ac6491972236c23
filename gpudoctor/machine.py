"""The whole machine, no job: what `gpudoctor` alone shows (GPU and host readings and
the processes one could watch). Core: the home screen renders what this hands it."""

from __future__ import annotations

import time

from gpudoctor.jobs.source import GpuProcessNames
from gpudoctor.processes import ProcessLister, ProcessRow
from gpudoctor.snapshot import Snapshot, take
from gpudoctor.sources.host import HostReader
from gpudoctor.sources.nvml import NvmlReader
from gpudoctor.timeline import Timeline


class Machine:
    def __init__(self, nvml: NvmlReader | None = None) -> None:
        self.nvml = nvml if nvml is not None else NvmlReader()
        self.host = HostReader(None)
        self.lister = ProcessLister()
        self.names = GpuProcessNames()
        self.timeline = Timeline([], time.time(), time.monotonic_ns(), gpu_reason=self.nvml.reason)

    def tick(self) -> tuple[Snapshot, list[ProcessRow]]:
        self.timeline.host.append(self.host.read())
        gpus = self.names.fill(self.nvml.read())
        self.timeline.gpus.extend(gpus)
        return take(self.timeline), self.lister.rows(gpus)
