# expect: steps=40 exit=-9
"""Killed with SIGKILL at step 40 (the out-of-memory killer, a scheduler's hard limit):
nothing of the job runs after it, and the doctor still counts every step."""
import os
import signal

import torch

torch.manual_seed(30)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.Adam(model.parameters())
for step in range(1000):
    loss = model(torch.randn(8, 16)).logsumexp(1).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 39:
        print("killed at", step + 1, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
