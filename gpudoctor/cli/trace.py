"""`gpudoctor trace PATH... [--json]`: the GPU timeline of torch.profiler / Kineto traces
(DESIGN.md section 10). Bad input (not a trace, a truncated file): one line, exit 2."""

from __future__ import annotations

import json
import sys
from argparse import Namespace

from gpudoctor.cli.common import USAGE_ERROR, lang_of
from gpudoctor.report.gpu_timeline import TraceReport
from gpudoctor.sources.kineto import TraceError, read_all


def command(args: Namespace) -> int:
    try:
        traces = read_all(list(args.paths))
    except TraceError as exc:
        print(f"gpudoctor trace: {exc}", file=sys.stderr)
        return USAGE_ERROR
    report = TraceReport(traces, lang_of(args))
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    else:
        sys.stdout.write(report.text())
    return 0
