# expect: steps=10
"""L-BFGS with a closure that runs forward and backward several times per step."""
import torch
import torch.nn as nn
from _digest import digest

torch.manual_seed(14)
model = nn.Sequential(nn.Linear(3, 12), nn.Tanh(), nn.Linear(12, 1))
x = torch.linspace(-1, 1, 90).view(30, 3)
y = (x ** 2).sum(1, keepdim=True)
opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5, history_size=10)
calls = 0


def closure():
    global calls
    calls += 1
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


for step in range(10):
    loss = opt.step(closure)
print("loss", repr(loss.item()), "closure calls", calls, digest(model))
