# expect: steps=12
"""A Hugging Face Trainer on a tiny BERT built from a config (nothing downloaded),
sequence classification on synthetic tokens, then evaluate and predict."""
import os
import tempfile

import torch
from transformers import (BertConfig, BertForSequenceClassification, PrinterCallback, Trainer,
                          TrainingArguments)
from transformers.utils import logging as hf_logging
from _digest import digest

hf_logging.set_verbosity_error()
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(5, 100, (n, 12), generator=g)
        self.labels = (self.ids[:, 0] > 50).long()

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(12, dtype=torch.long),
                "labels": self.labels[i]}


torch.manual_seed(27)
config = BertConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=32)
model = BertForSequenceClassification(config)
with tempfile.TemporaryDirectory() as out:
    args = TrainingArguments(output_dir=out, max_steps=12, per_device_train_batch_size=8,
                             per_device_eval_batch_size=16, learning_rate=1e-3, report_to=[],
                             logging_strategy="no", save_strategy="no", disable_tqdm=True,
                             use_cpu=True, seed=27, dataloader_num_workers=0)
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(200, 0), eval_dataset=Tokens(32, 1))
    trainer.remove_callback(PrinterCallback)  # it prints timings, which differ run to run
    result = trainer.train()
    metrics = trainer.evaluate()
    pred = trainer.predict(Tokens(16, 2))
print("train loss", repr(result.training_loss), "steps", result.global_step)
print("eval loss", repr(metrics["eval_loss"]), "pred", digest(torch.as_tensor(pred.predictions)))
print("model", digest(model))
