# expect: steps=20,10
"""os.fork(): the child trains its own copy for 20 steps and leaves with os._exit, the
parent trains 10 and waits for it (as some hyperparameter sweeps do)."""
import os

import torch
from _digest import digest

torch.manual_seed(21)
model = torch.nn.Linear(6, 1)
x = torch.randn(32, 6)


def train(steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(steps):
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss


pid = os.fork()
if pid == 0:
    loss = train(20)
    print("child", repr(loss.item()), digest(model), flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
loss = train(10)
print("parent", repr(loss.item()), digest(model), "child status", status)
