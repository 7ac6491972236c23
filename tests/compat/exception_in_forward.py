# expect: steps=7 exit=1
"""Dies of a shape error raised inside the model's forward at step 8: the traceback
(every frame of it) is the job's own."""
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(10):
    width = 4 if step < 7 else 5  # a bad batch
    loss = model(torch.ones(2, width)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
