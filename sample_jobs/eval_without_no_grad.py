"""An evaluation loop that forgets torch.no_grad(): every forward records an autograd
graph that no backward ever uses (memory and time for nothing).

Demonstrates: grad-in-inference.
"""

from __future__ import annotations

import time

import torch

from _common import mlp, parser, step_range


def main() -> None:
    args = parser(__doc__.splitlines()[0], steps=120, batch_size=256).parse_args()
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    x_all = torch.randn(8192, 512, device=device)
    y_all = torch.randint(0, 10, (8192,), device=device)
    model = mlp(512, 1024, 10, depth=3).to(device)
    model.eval()
    correct = 0
    start = time.perf_counter()
    for step in step_range(args):
        i = (step * args.batch_size) % max(1, x_all.shape[0] - args.batch_size)
        x, y = x_all[i : i + args.batch_size], y_all[i : i + args.batch_size]
        logits = model(x)  # should be inside `with torch.no_grad():`
        correct += int((logits.argmax(dim=1) == y).sum())
    print(
        f"eval: {step + 1} batches in {time.perf_counter() - start:.1f} s, "
        f"accuracy {correct / ((step + 1) * args.batch_size):.3f}"
    )


if __name__ == "__main__":
    main()
