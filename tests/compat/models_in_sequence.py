# expect: steps=55
"""Two models trained one after the other, each with its own optimizer (the first is
freed before the second is made): 30 steps, then 25."""
import gc

import torch
import torch.nn as nn
from _digest import digest

torch.manual_seed(12)
results = []
for width, steps in ((16, 30), (24, 25)):
    model = nn.Sequential(nn.Linear(10, width), nn.ReLU(), nn.Linear(width, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(64, 10), torch.randn(64, 1)
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    results.append((repr(loss.item()), digest(model)))
    del model, opt
    gc.collect()
print(results)
