# expect: steps=80
"""No torch.optim: a hand-written SGD update under no_grad after each backward, and the
data sliced by hand (no DataLoader)."""
import torch
from _digest import digest

torch.manual_seed(15)
w = torch.randn(5, 1, requires_grad=True)
b = torch.zeros(1, requires_grad=True)
X = torch.randn(400, 5)
Y = X @ torch.tensor([[1.0], [-2.0], [0.5], [3.0], [0.0]]) + 0.1
for step in range(80):
    xb, yb = X[step * 5 % 400 :][:5], Y[step * 5 % 400 :][:5]
    loss = ((xb @ w + b - yb) ** 2).mean()
    loss.backward()
    with torch.no_grad():
        w -= 0.05 * w.grad
        b -= 0.05 * b.grad
        w.grad.zero_()
        b.grad.zero_()
print("loss", repr(loss.item()), digest({"w": w, "b": b}))
