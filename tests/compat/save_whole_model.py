# expect: steps=40
"""Saves the whole model object every step (as pytorch/examples' word_language_model
does with its best model) and pickles it; reloads and evaluates at the end."""
import io
import pickle

import torch
import torch.nn as nn
from _digest import digest

torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 5))

    def forward(self, x):
        return self.body(x)


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
x, y = torch.randn(256, 20), torch.randint(0, 5, (256,))
best = None
for step in range(40):
    xb, yb = x[step % 8 * 32 :][:32], y[step % 8 * 32 :][:32]
    loss = nn.functional.cross_entropy(model(xb), yb)
    opt.zero_grad()
    loss.backward()
    opt.step()
    buf = io.BytesIO()
    torch.save(model, buf)  # the whole object, not the state_dict
    best = buf.getvalue()
    blob = pickle.dumps(model)
    assert pickle.loads(blob)(xb).shape == (32, 5)
restored = torch.load(io.BytesIO(best), weights_only=False)
with torch.no_grad():
    print("eval", repr(nn.functional.cross_entropy(restored(x), y).item()))
print("loss", repr(loss.item()), "state", digest(restored))
print("hooks", len(restored._forward_hooks), len(restored._forward_pre_hooks))
