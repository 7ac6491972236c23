# expect: steps=15
"""The user's own hooks of every kind: forward pre/post (with kwargs), full backward,
tensor hooks, a global module hook, a state_dict hook; the script inspects the hook
tables and the handles' ids as some libraries do."""
import torch
import torch.nn as nn
from torch.nn.modules.module import register_module_forward_hook
from _digest import digest

torch.manual_seed(18)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
seen = {"pre": 0, "post": 0, "bwd": 0, "tensor": 0, "global": 0}


def pre(mod, args, kwargs):
    seen["pre"] += 1
    return (args[0] * 1.0,), kwargs


def post(mod, args, output):
    seen["post"] += 1
    return output + 0.0


def bwd(mod, grad_in, grad_out):
    seen["bwd"] += 1


def count_global(mod, args, output):
    seen["global"] += 1


handles = [
    model.register_forward_pre_hook(pre, with_kwargs=True),
    model[0].register_forward_hook(post),
    model[2].register_full_backward_hook(bwd),
    register_module_forward_hook(count_global),
]
model[2].weight.register_hook(lambda g: seen.__setitem__("tensor", seen["tensor"] + 1))
model.register_state_dict_post_hook(lambda m, sd, prefix, local: None)
print("handle ids", [h.id for h in handles])
print("tables", list(model._forward_pre_hooks), list(model[0]._forward_hooks),
      list(model._forward_hooks), list(model._backward_hooks), list(model[2]._backward_hooks))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(15):
    loss = model(torch.ones(3, 4)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
for h in handles:
    h.remove()
print("seen", seen, "after removal", dict(model._forward_pre_hooks), dict(model[0]._forward_hooks))
print("opt hooks", len(opt._optimizer_step_pre_hooks), len(opt._optimizer_step_post_hooks))
print("loss", repr(loss.item()), digest(model))
