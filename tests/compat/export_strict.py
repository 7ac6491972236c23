# expect: steps=15
"""torch.export after training, strict (the Dynamo tracer) and non-strict, in a fresh
process: the exported programs run and match the eager model."""
import torch
import torch.nn as nn
from _digest import digest

torch.manual_seed(3)


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 16, 2)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


model = Classifier()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(32, 4, 16), torch.randint(0, 2, (32,))
for _ in range(15):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
model.eval()
for strict in (True, False):
    ep = torch.export.export(model, (x,), strict=strict)
    out = ep.module()(x)
    print("strict" if strict else "non-strict", torch.allclose(out, model(x)),
          len(ep.graph.nodes), sorted(ep.state_dict))
print("loss", repr(loss.item()), digest(model))
