# expect: steps=40
"""An encoder and a decoder with an optimizer each (different learning rates and
classes), both stepping every iteration."""
import torch
import torch.nn as nn
from _digest import digest

torch.manual_seed(11)
encoder = nn.Sequential(nn.Linear(20, 8), nn.Tanh())
decoder = nn.Sequential(nn.Linear(8, 20))
opt_enc = torch.optim.Adam(encoder.parameters(), lr=1e-3)
opt_dec = torch.optim.SGD(decoder.parameters(), lr=1e-2, momentum=0.9)
x = torch.randn(100, 20)
for step in range(40):
    recon = decoder(encoder(x))
    loss = nn.functional.mse_loss(recon, x)
    opt_enc.zero_grad()
    opt_dec.zero_grad()
    loss.backward()
    opt_enc.step()
    opt_dec.step()
print("loss", repr(loss.item()), digest(encoder), digest(decoder))
