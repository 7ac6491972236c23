# expect: steps=24
"""Models that return a dict, a tuple, a namedtuple and a dataclass (as Hugging Face
models return ModelOutput); the losses are read from the structures."""
from collections import namedtuple
from dataclasses import dataclass

import torch
import torch.nn as nn
from _digest import digest

torch.manual_seed(16)
Pair = namedtuple("Pair", "logits aux")


@dataclass
class Output:
    loss: torch.Tensor
    logits: torch.Tensor


class DictNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x, labels=None):
        logits = self.fc(x)
        out = {"logits": logits, "hidden": (logits.relu(), [logits.sigmoid()])}
        if labels is not None:
            out["loss"] = nn.functional.cross_entropy(logits, labels)
        return out


class PairNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x):
        logits = self.fc(x)
        return Pair(logits, logits.abs().mean())


class DataNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 3)

    def forward(self, x, *, labels):
        logits = self.fc(x)
        return Output(nn.functional.cross_entropy(logits, labels), logits)


nets = [DictNet(), PairNet(), DataNet()]
opt = torch.optim.SGD([p for n in nets for p in n.parameters()], lr=0.1)
x, y = torch.randn(20, 6), torch.randint(0, 3, (20,))
for step in range(24):
    d = nets[0](x, labels=y)
    logits, aux = nets[1](x)
    o = nets[2](x, labels=y)
    loss = d["loss"] + nn.functional.cross_entropy(logits, y) + aux + o.loss
    opt.zero_grad()
    loss.backward()
    opt.step()
print("loss", repr(loss.item()), [digest(n) for n in nets], type(o).__name__, sorted(d))
