# expect: steps=20
"""TorchScript: scripts and traces the model being trained, saves and reloads both,
and checks they agree with the eager model."""
import io
import warnings

import torch
import torch.nn as nn
from _digest import digest

torch.manual_seed(2)


class Block(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x + torch.relu(self.lin(x)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(24) for _ in range(2)])
        self.head = nn.Linear(24, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


model = Model()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(64, 24)
for step in range(20):
    loss = model(x).logsumexp(1).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
model.eval()
scripted = torch.jit.script(model)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    traced = torch.jit.trace(model, x)
print("trace warnings", [str(w.message) for w in caught])
for m in (scripted, traced):
    buf = io.BytesIO()
    torch.jit.save(m, buf)
    buf.seek(0)
    loaded = torch.jit.load(buf)
    print("agree", torch.equal(loaded(x), model(x)), digest(loaded.state_dict()))
print("loss", repr(loss.item()), digest(model))
print("scripted graph nodes", len(list(scripted.graph.nodes())))
