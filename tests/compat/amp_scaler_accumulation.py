# expect: steps=12
"""Mixed precision (CPU autocast to bfloat16) with a GradScaler, four micro-batches of
gradient accumulation per optimizer step, and gradient clipping."""
import torch
import torch.nn as nn
from _digest import digest

torch.manual_seed(10)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
scaler = torch.amp.GradScaler("cpu")
accum = 4
data = torch.randn(48 * accum, 32)
labels = torch.randint(0, 10, (48 * accum,))
for step in range(12):
    for micro in range(accum):
        sl = slice(micro * 48, (micro + 1) * 48)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(model(data[sl]), labels[sl]) / accum
        scaler.scale(loss).backward()
    scaler.unscale_(opt)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
print("loss", repr(loss.item()), "norm", repr(norm.item()), digest(model))
