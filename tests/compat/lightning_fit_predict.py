# expect: steps=24
"""A LightningModule trained with Trainer.fit, then predictions with
predict_dataloader() and with a loader passed directly that has its own collate_fn
(Lightning rebuilds loaders from DataLoader.__init__'s signature)."""
import logging

import lightning.pytorch as pl
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from _digest import digest

logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)


def offset_collate(batch):
    xs = torch.stack([b[0] for b in batch])
    return xs + 100.0  # a collate_fn that changes what the model sees


class Regressor(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def predict_step(self, batch, batch_idx):
        x = batch[0] if isinstance(batch, (list, tuple)) else batch
        return self(x)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(0)
        return DataLoader(TensorDataset(torch.randn(96, 3, generator=g), torch.randn(96, 1, generator=g)),
                          batch_size=8)

    def predict_dataloader(self):
        return DataLoader(TensorDataset(torch.ones(10, 3)), batch_size=5)


pl.seed_everything(26, verbose=False)
model = Regressor()
trainer = pl.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False,
                     enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(model)
print("global_step", trainer.global_step, digest(model))
own = trainer.predict(model)
print("predict_dataloader()", digest(torch.cat(own)))
direct = DataLoader(TensorDataset(torch.ones(10, 3)), batch_size=5, collate_fn=offset_collate)
passed = trainer.predict(model, dataloaders=direct)
print("passed loader", digest(torch.cat(passed)), float(torch.cat(passed).mean()) != float(torch.cat(own).mean()))
