# expect: steps=6 exit=1
"""A corrupt sample raises inside the Dataset, in the main process: the DataLoader's
traceback reaches the user unchanged. Caught once and retried, then fatal."""
import torch
from torch.utils.data import DataLoader, Dataset


class Records(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        if i == 24:
            raise ValueError(f"corrupt record {i}")
        return torch.tensor([float(i)]), torch.tensor([1.0])


model = torch.nn.Linear(1, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Records(), batch_size=4)
try:
    for x, y in loader:
        loss = (model(x) - y).pow(2).mean()
        opt.zero_grad(); loss.backward(); opt.step()
except ValueError as exc:
    import traceback
    print("caught:", exc)
    print("".join(traceback.format_exception(exc)).count("File"), "frames")
for x, y in loader:
    loss = (model(x) - y).pow(2).mean()
