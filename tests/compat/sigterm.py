# expect: steps=30 exit=-15
"""Killed by SIGTERM at step 30 (a scheduler's time limit) with the default handler:
the job dies of the signal; the doctor still counts its steps."""
import os
import signal

import torch

model = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(1000):
    loss = model(torch.randn(4, 16)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 29:
        print("terminating at", step + 1, flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
