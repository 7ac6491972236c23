# expect: steps=6
"""Warnings raised inside forward with stack levels that point at the caller; each
warning's file and line are the user's, and 'default' shows each location once."""
import warnings

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        warnings.warn("deprecated input layout", DeprecationWarning, stacklevel=2)
        warnings.warn("checking the caller", UserWarning, stacklevel=4)
        return nn.functional.softmax(self.fc(x))  # implicit dim: torch warns too


warnings.simplefilter("default")
torch.manual_seed(29)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(6):
    loss = model(torch.ones(2, 3)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("done", repr(loss.item()))
