# expect: steps=50
"""An exponential moving average of the weights kept in a deepcopy of the model, as
timm's ModelEmaV2 does; the EMA copy is evaluated and copied again."""
import copy

import torch
import torch.nn as nn
from _digest import digest

torch.manual_seed(1)
model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 1))
ema = copy.deepcopy(model).eval()
for p in ema.parameters():
    p.requires_grad_(False)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
data = torch.randn(512, 16)
target = data.sum(1, keepdim=True).sin()
for step in range(50):
    idx = torch.arange(step * 16, step * 16 + 64) % 512
    loss = nn.functional.mse_loss(model(data[idx]), target[idx])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    with torch.no_grad():
        for e, p in zip(ema.state_dict().values(), model.state_dict().values()):
            e.copy_(e * 0.9 + p * 0.1) if e.dtype.is_floating_point else e.copy_(p)
snapshot = copy.deepcopy(ema)
with torch.no_grad():
    print("ema eval", repr(nn.functional.mse_loss(snapshot(data), target).item()))
print("hooks on the copy", dict(snapshot._forward_hooks), dict(snapshot._forward_pre_hooks))
print("loss", repr(loss.item()), digest(model), digest(ema))
