# expect: steps=5
"""Exports an untrained model, strict, before anything else touches it (a deployment
script), then runs the exported program on a few batches."""
import torch
import torch.nn as nn

torch.manual_seed(9)
model = nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 2)).eval()
example = (torch.randn(4, 6),)
ep = torch.export.export(model, example, strict=True)
module = ep.module()
total = sum(module(torch.randn(4, 6)).sum().item() for _ in range(5))
print("exported nodes", len(ep.graph.nodes), "signature", [s.kind.name for s in ep.graph_signature.input_specs])
print("total", repr(total))
