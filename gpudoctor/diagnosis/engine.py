"""Runs every rule over a window and ranks what they find."""

from __future__ import annotations

import dataclasses

from gpudoctor.diagnosis.rules import (
    comm_bound,
    cpu_saturated,
    cudnn_benchmark_off,
    data_parallel,
    gpu_throttled,
    grad_in_inference,
    host_sync,
    input_bound,
    low_goodput,
    low_gpu_util,
    memory_pressure,
    no_mixed_precision,
    noisy_neighbour,
    not_compiled,
    out_of_memory,
    pageable_copies,
    slow_storage,
    small_batch,
    straggler,
)
from gpudoctor.diagnosis.timeline_rules import diagnose as diagnose_timeline
from gpudoctor.diagnosis.window import Window
from gpudoctor.i18n import _
from gpudoctor.model import Finding

RULES = (
    out_of_memory,
    input_bound,
    slow_storage,
    cpu_saturated,
    noisy_neighbour,
    host_sync,
    pageable_copies,
    low_gpu_util,
    small_batch,
    no_mixed_precision,
    memory_pressure,
    not_compiled,
    cudnn_benchmark_off,
    grad_in_inference,
    data_parallel,
    gpu_throttled,
    straggler,
    comm_bound,
    low_goodput,
)

FINDING_IDS = tuple(rule.ID for rule in RULES)

# A run that crashed: that comes first, whatever else was slow.
FIRST = (out_of_memory.ID,)
# A finding that names the cause behind a broader one ranks just above it.
REFINES = {
    slow_storage.ID: input_bound.ID,
    cpu_saturated.ID: input_bound.ID,
    small_batch.ID: low_gpu_util.ID,
}


def diagnose(window: Window) -> list[Finding]:
    findings = []
    for rule in RULES:
        finding = rule.evaluate(window)
        if finding is None:
            continue
        if window.estimated and getattr(rule, "STEP_SIGNALS", False):
            finding = dataclasses.replace(finding, confidence="estimated")
        findings.append(finding)
    if window.gpu_timeline is not None:
        # a profiler capture read as the GPU's timeline: what it finds that the live rules
        # did not (host-sync and pageable-copies are both's: the live rule's stays)
        live = {f.id for f in findings}
        findings += [f for f in diagnose_timeline(window.gpu_timeline) if f.id not in live]
    findings = _explain_low_util(findings)
    return rank(findings)


def rank(findings: list[Finding]) -> list[Finding]:
    """By severity, then estimated gain; a refining finding just above the one it refines."""
    by_id = {f.id: f for f in findings}

    def key(f: Finding) -> tuple[bool, tuple[int, bool, float], int]:
        first = f.id not in FIRST
        parent = by_id.get(REFINES.get(f.id, ""))
        if parent is not None and parent.rank_key() <= f.rank_key():
            return (first, parent.rank_key(), 0)
        return (first, f.rank_key(), 1)

    return sorted(findings, key=key)


def _explain_low_util(findings: list[Finding]) -> list[Finding]:
    """low-gpu-util is a symptom: name the causes the other rules found."""
    causes = [f for f in findings if f.id != low_gpu_util.ID and f.severity != "info"]
    out = []
    for f in findings:
        if f.id == low_gpu_util.ID and causes:
            top = sorted(causes, key=Finding.rank_key)
            names = ", ".join(c.id for c in top)
            remedies = tuple(dict.fromkeys(r for c in top for r in c.remedies))
            f = dataclasses.replace(
                f,
                evidence=f.evidence + _(" Likely cause: {names}.").format(names=names),
                remedies=remedies,
            )
        out.append(f)
    return out
