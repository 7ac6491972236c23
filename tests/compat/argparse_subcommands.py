# args: train --epochs 2 --lr 0.05 --unknown-flag 7
# expect: steps=16
"""A command-line tool with subcommands (argparse subparsers), parse_known_args for
flags meant for someone else, and defaults from a parent parser."""
import argparse

import torch
import torch.nn as nn
from _digest import digest

parent = argparse.ArgumentParser(add_help=False)
parent.add_argument("--seed", type=int, default=20)
parser = argparse.ArgumentParser(prog="trainer")
sub = parser.add_subparsers(dest="cmd", required=True)
train = sub.add_parser("train", parents=[parent])
train.add_argument("--epochs", type=int, default=1)
train.add_argument("--lr", type=float, default=0.1)
train.add_argument("-b", "--batch-size", type=int, default=8)
sub.add_parser("eval", parents=[parent])
args, rest = parser.parse_known_args()
print("args", sorted(vars(args).items()), "rest", rest)
torch.manual_seed(args.seed)
model = nn.Linear(3, 1)
opt = torch.optim.SGD(model.parameters(), lr=args.lr)
x = torch.randn(64, 3)
for epoch in range(args.epochs):
    for i in range(0, 64, args.batch_size):
        loss = model(x[i : i + args.batch_size]).abs().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
print("loss", repr(loss.item()), digest(model))
