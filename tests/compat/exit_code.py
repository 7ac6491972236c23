# expect: steps=10 exit=3
"""Ends with sys.exit(3) after training (a script that reports failure to its scheduler
by exit code), with an atexit handler and unflushed output."""
import atexit
import sys

import torch

torch.manual_seed(28)

atexit.register(lambda: print("atexit ran"))
model = torch.nn.Linear(2, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(10):
    loss = model(torch.ones(1, 2)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("loss", repr(loss.item()), end="")
sys.exit(3)
