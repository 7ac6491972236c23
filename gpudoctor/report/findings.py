"""A finding in the report's form (DESIGN.md section 6): its remedies with their titles,
the guide sections they cite, and how each applies to this job."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpudoctor.diagnosis.remedies import CATALOGUE
from gpudoctor.model import Finding
from gpudoctor.prescribe.how import how
from gpudoctor.report.values import FindingLine, Json, RemedyLine


def finding_line(
    f: Finding,
    facts: dict[str, Any],
    cores: int,
    lang: str,
    predicted: Mapping[str, Json] | None = None,
) -> FindingLine:
    return FindingLine(
        id=f.id,
        severity=f.severity,
        title=f.title,
        evidence=f.evidence,
        estimated_gain=f.estimated_gain,
        confidence=f.confidence,
        remedies=tuple(
            RemedyLine(
                id=r,
                title=CATALOGUE[r].title[lang],
                how=how(r, facts, cores, lang),
                guide=CATALOGUE[r].guide_section,
            )
            for r in f.remedies
        ),
        predicted_speedup=predicted,
    )
