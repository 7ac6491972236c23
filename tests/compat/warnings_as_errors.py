# python: -W error
# expect: steps=20
"""Run with `python -W error`: any warning anywhere (the probe's included) would kill
it. Uses a DataLoader, a compiled model and a scheduler."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from _digest import digest

torch.manual_seed(25)
model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
compiled = torch.compile(model, backend="eager")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5)
loader = DataLoader(TensorDataset(torch.randn(80, 4), torch.randn(80, 1)), batch_size=4)
for x, y in loader:
    loss = nn.functional.mse_loss(compiled(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
print("loss", repr(loss.item()), digest(model))
