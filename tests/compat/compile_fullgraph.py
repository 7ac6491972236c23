# expect: steps=30
"""fullgraph=True, both ways: torch.compile(model, fullgraph=True) and
model.compile(fullgraph=True), eager backend; a graph break would raise."""
import torch
import torch.nn as nn
from _digest import digest
from _dynamo_stats import dynamo_stats

torch.manual_seed(5)


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = nn.Sequential(nn.Linear(12, 24), nn.ReLU(), nn.Linear(24, 24), nn.ReLU())
        self.out = nn.Linear(24, 1)

    def forward(self, x):
        return self.out(self.hidden(x))


def make():
    return Regressor()


a = make()
ca = torch.compile(a, fullgraph=True, backend="eager")
b = make()
b.compile(fullgraph=True, backend="eager")
opt = torch.optim.SGD(list(a.parameters()) + list(b.parameters()), lr=0.01)
x = torch.randn(50, 12)
for step in range(30):
    loss = ca(x).mean() + b(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("dynamo", dynamo_stats())
print("loss", repr(loss.item()), digest(a), digest(b))
