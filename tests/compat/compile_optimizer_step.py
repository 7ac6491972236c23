# expect: steps=20
"""The optimizer step compiled (the PyTorch tutorial's pattern), model eager."""
import torch
import torch.nn as nn
from _digest import digest
from _dynamo_stats import dynamo_stats

torch.manual_seed(8)
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
opt = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.01))


@torch.compile(fullgraph=False, backend="eager")
def step():
    opt.step()


x = torch.randn(32, 8)
for _ in range(20):
    loss = model(x).pow(2).sum()
    opt.zero_grad()
    loss.backward()
    step()
print("dynamo", dynamo_stats())
print("loss", repr(loss.item()), digest(model))
