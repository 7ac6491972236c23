# expect: steps=20
"""A language model whose output layer shares the embedding's weight (tied weights);
the state_dict is saved and loaded back into a fresh model."""
import io

import torch
import torch.nn as nn
from _digest import digest

torch.manual_seed(17)


class TinyLM(nn.Module):
    def __init__(self, vocab=50, dim=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.rnn = nn.GRU(dim, dim, batch_first=True)
        self.out = nn.Linear(dim, vocab, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, tokens):
        h, _ = self.rnn(self.embed(tokens))
        return self.out(h)


model = TinyLM()
opt = torch.optim.Adam(model.parameters(), lr=5e-3)
tokens = torch.randint(0, 50, (8, 12))
for _ in range(20):
    logits = model(tokens[:, :-1])
    loss = nn.functional.cross_entropy(logits.reshape(-1, 50), tokens[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
buf = io.BytesIO()
torch.save(model.state_dict(), buf)
buf.seek(0)
fresh = TinyLM()
fresh.load_state_dict(torch.load(buf))
print("tied", fresh.out.weight is fresh.embed.weight, "params", sum(1 for _ in fresh.parameters()))
print("loss", repr(loss.item()), digest(fresh))
