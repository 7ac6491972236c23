# expect: steps=16
"""Activation checkpointing, both implementations (use_reentrant True and False), and
checkpoint_sequential: forwards run again during backward."""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint, checkpoint_sequential
from _digest import digest

torch.manual_seed(22)


class Deep(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Linear(16, 16), nn.GELU())
        self.b = nn.Sequential(nn.Linear(16, 16), nn.GELU())
        self.c = nn.Sequential(*[nn.Linear(16, 16) for _ in range(4)])

    def forward(self, x):
        x = checkpoint(self.a, x, use_reentrant=True)
        x = checkpoint(self.b, x, use_reentrant=False)
        return checkpoint_sequential(self.c, 2, x, use_reentrant=False)


model = Deep()
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(10, 16, requires_grad=True)
for _ in range(16):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("loss", repr(loss.item()), digest(model))
