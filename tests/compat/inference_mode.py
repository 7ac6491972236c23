# expect: steps=12
"""Batch inference with torch.inference_mode and a DataLoader, the model loaded from a
state_dict, predictions written out."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from _digest import digest

torch.manual_seed(24)
model = nn.Sequential(nn.Linear(7, 7), nn.ReLU(), nn.Linear(7, 3))
model.load_state_dict({k: torch.ones_like(v) * 0.1 for k, v in model.state_dict().items()})
model.eval()
preds = []
with torch.inference_mode():
    for (xb,) in DataLoader(TensorDataset(torch.randn(96, 7)), batch_size=8):
        preds.append(model(xb).argmax(1))
print("predictions", digest(torch.cat(preds)), len(preds))
