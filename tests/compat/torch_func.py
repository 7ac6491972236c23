# expect: steps=22
"""Functional training with torch.func: functional_call, grad and vmap over
per-sample gradients, the update applied by hand (no optimizer, no backward()).
With neither, the probe's steps are the model's calls: 20 in the loop, then one for
the per-sample gradients and one for the final loss."""
import torch
import torch.nn as nn
from torch.func import functional_call, grad, vmap
from _digest import digest

torch.manual_seed(23)
model = nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 1))
params = {k: v.detach() for k, v in model.named_parameters()}
x, y = torch.randn(24, 5), torch.randn(24, 1)


def loss_fn(p, xb, yb):
    return nn.functional.mse_loss(functional_call(model, p, (xb,)), yb)


per_sample = vmap(grad(loss_fn), in_dims=(None, 0, 0))
for step in range(20):
    g = grad(loss_fn)(params, x, y)
    params = {k: params[k] - 0.1 * g[k] for k in params}
ps = per_sample(params, x.unsqueeze(1), y.unsqueeze(1))
print("loss", repr(loss_fn(params, x, y).item()), digest(params), sorted(ps))
