"""What a compile script prints about Dynamo's work: frames, graphs, graph breaks,
recompiles and guards. Any difference under the doctor shows in its output."""

import torch._dynamo


def dynamo_stats() -> str:
    c = torch._dynamo.utils.counters
    parts = {
        "frames": dict(sorted(c["frames"].items())),
        "stats": dict(sorted(c["stats"].items())),
        "graph_breaks": sum(c["graph_break"].values()),
        "recompiles": sum(c["recompiles"].values()),
        "unimplemented": sum(c["unimplemented"].values()),
    }
    return repr(parts)


def explain(fn, *args) -> str:
    out = torch._dynamo.explain(fn)(*args)
    return f"graphs={out.graph_count} breaks={out.graph_break_count} guards={len(out.out_guards or [])}"
