# expect: steps=20
"""torch.compile(model) (AOT eager backend) trained for a few steps; what Dynamo did is
printed (frames, graphs, breaks, recompiles, and guards through torch._dynamo.explain)."""
import torch
import torch.nn as nn
from _digest import digest
from _dynamo_stats import dynamo_stats, explain

torch.manual_seed(4)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.SiLU(), nn.Dropout(0.0), nn.Linear(64, 8))
        self.norm = nn.LayerNorm(8)

    def forward(self, x):
        return self.norm(self.net(x))


model = MLP()
compiled = torch.compile(model, backend="aot_eager")
opt = torch.optim.Adam(compiled.parameters(), lr=1e-3)
x = torch.randn(128, 32)
for step in range(20):
    loss = compiled(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("dynamo", dynamo_stats())
print("explain", explain(model, x))
print("loss", repr(loss.item()), digest(model))
