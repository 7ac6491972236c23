# expect: steps=25
"""The whole forward and loss compiled as one function that calls the model, the way
people compile a train step; backward and the optimizer run eagerly."""
import torch
import torch.nn as nn
from _digest import digest
from _dynamo_stats import dynamo_stats

torch.manual_seed(7)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(10, 20)
        self.b = nn.Linear(20, 3)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


model = Net()
opt = torch.optim.Adam(model.parameters(), lr=1e-2)


@torch.compile(backend="aot_eager")
def compute_loss(x, y):
    return nn.functional.cross_entropy(model(x), y)


x, y = torch.randn(40, 10), torch.randint(0, 3, (40,))
for _ in range(25):
    loss = compute_loss(x, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("dynamo", dynamo_stats())
print("loss", repr(loss.item()), digest(model))
