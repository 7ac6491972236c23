# expect: steps=12
"""The default backend (inductor, C++ on a CPU), fullgraph, a few steps."""
import torch
import torch.nn as nn
from _digest import digest
from _dynamo_stats import dynamo_stats

torch.manual_seed(6)
model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
compiled = torch.compile(model, fullgraph=True)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(64, 16)
for step in range(12):
    loss = compiled(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("dynamo", dynamo_stats())
print("loss", f"{loss.item():.5f}", len(digest(model)))
