"""A short real training run with hoop.torch: a small network learns
y = sin(3 x0) + x1^2 on data every rank shards, printing the loss (averaged
over the ranks) as it goes.

    build/hooprun -np 2 /usr/bin/python3 examples/torch_train.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import hoop.torch as hvd  # noqa: E402

hvd.init()
torch.set_num_threads(1)
torch.manual_seed(42)  # the same data and the same initial model on every rank
x = torch.rand(4096, 2) * 2 - 1
y = (torch.sin(3 * x[:, 0]) + x[:, 1] ** 2).unsqueeze(1)
mine = torch.arange(hvd.rank(), x.shape[0], hvd.size())  # this rank's shard
x, y = x[mine], y[mine]

model = torch.nn.Sequential(torch.nn.Linear(2, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

batch = 64
for epoch in range(5):
    perm = torch.randperm(x.shape[0], generator=torch.Generator().manual_seed(epoch))
    total = 0.0
    for i in range(0, x.shape[0] - batch + 1, batch):
        idx = perm[i:i + batch]
        optimizer.zero_grad()
        loss = F.mse_loss(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        total += loss.item()
    avg = hvd.allreduce(torch.tensor(total / (x.shape[0] // batch)), name="epoch_loss").item()
    if hvd.rank() == 0:
        print("epoch %d: loss %.5f" % (epoch, avg), flush=True)
hvd.shutdown()
