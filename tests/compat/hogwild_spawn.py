# expect: steps=30,30
"""Hogwild: the model in shared memory, trained by two processes started with the
'spawn' method, the model passed as an argument (as pytorch/examples' mnist_hogwild)."""
import torch
import torch.multiprocessing as mp
import torch.nn as nn
from _digest import digest


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(10, 16)
        self.fc2 = nn.Linear(16, 2)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def train(rank, model, queue):
    torch.manual_seed(100 + rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(30):
        x = torch.randn(8, 10)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    queue.put((rank, round(loss.item(), 3)))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Net()
    model.share_memory()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=train, args=(r, model, queue)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    results = sorted(queue.get() for _ in procs)
    print("exit codes", [p.exitcode for p in procs], "ranks", [r for r, _ in results])
    print("trained", model.fc1.weight.shape, len(digest(model)))
