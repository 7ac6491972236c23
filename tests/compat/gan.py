# expect: steps=30
"""A small GAN as in pytorch/examples' dcgan: a discriminator step then a generator
step each iteration, a DataLoader of real samples, detach() for the fake batch."""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from _digest import digest

torch.manual_seed(13)
netG = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
netD = nn.Sequential(nn.Linear(2, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
criterion = nn.BCEWithLogitsLoss()
optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
real_data = torch.randn(960, 2) * 0.5 + 1.0
loader = DataLoader(TensorDataset(real_data), batch_size=32, shuffle=True)
for i, (real,) in enumerate(loader):
    b = real.size(0)
    netD.zero_grad()
    errD_real = criterion(netD(real), torch.ones(b, 1))
    errD_real.backward()
    fake = netG(torch.randn(b, 4))
    errD_fake = criterion(netD(fake.detach()), torch.zeros(b, 1))
    errD_fake.backward()
    optD.step()
    netG.zero_grad()
    errG = criterion(netD(fake), torch.ones(b, 1))
    errG.backward()
    optG.step()
print("errD", repr((errD_real + errD_fake).item()), "errG", repr(errG.item()))
print(digest(netG), digest(netD))
