# expect: steps=3 exit=1
"""Calls backward twice through the same graph at step 4 (a classic bug): autograd's
error and traceback are the job's own."""
import torch

model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(6):
    loss = model(torch.ones(2, 3)).sum()
    opt.zero_grad()
    loss.backward()
    if step == 3:
        loss.backward()
    opt.step()
