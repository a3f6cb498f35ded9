"""A training script written for horovod.torch, as its documentation shows
one: nothing in it knows hoop. test_jobs.py runs it with only the import
line below changed to hoop.torch. (Run under horovodrun it would use
Horovod itself.)"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data
import torch.utils.data.distributed

import horovod.torch as hvd

parser = argparse.ArgumentParser(description="a small classifier with Horovod")
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--fp16-allreduce", action="store_true")
parser.add_argument("--gradient-predivide-factor", type=float, default=1.0)
parser.add_argument("--no-cuda", action="store_true")
parser.add_argument("--seed", type=int, default=42)
args = parser.parse_args()

hvd.init()
torch.manual_seed(args.seed)
use_cuda = not args.no_cuda and torch.cuda.is_available()
if use_cuda:
    torch.cuda.set_device(hvd.local_rank())
    torch.cuda.manual_seed(args.seed)
torch.set_num_threads(1)

# Four classes in 16 dimensions, the same points on every rank; the
# sampler gives each rank its part.
g = torch.Generator().manual_seed(7)
centers = torch.randn(4, 16, generator=g) * 2
labels = torch.randint(0, 4, (1024,), generator=g)
points = centers[labels] + torch.randn(1024, 16, generator=g)
train_set = torch.utils.data.TensorDataset(points[:768], labels[:768])
test_set = torch.utils.data.TensorDataset(points[768:], labels[768:])
train_sampler = torch.utils.data.distributed.DistributedSampler(train_set, num_replicas=hvd.size(),
                                                                rank=hvd.rank())
train_loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size, sampler=train_sampler)
test_sampler = torch.utils.data.distributed.DistributedSampler(test_set, num_replicas=hvd.size(),
                                                               rank=hvd.rank())
test_loader = torch.utils.data.DataLoader(test_set, batch_size=64, sampler=test_sampler)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return F.log_softmax(self.fc2(self.drop(F.relu(self.fc1(x)))), dim=1)


model = Net()
if use_cuda:
    model.cuda()
# Horovod's advice: scale the learning rate by the number of workers.
optimizer = optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.5)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     compression=compression, op=hvd.Average,
                                     gradient_predivide_factor=args.gradient_predivide_factor)


def metric_average(value, name):
    return hvd.allreduce(torch.tensor(value), name=name).item()


def train(epoch):
    model.train()
    train_sampler.set_epoch(epoch)
    for data, target in train_loader:
        if use_cuda:
            data, target = data.cuda(), target.cuda()
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()


def test(epoch):
    model.eval()
    loss, correct = 0.0, 0.0
    with torch.no_grad():
        for data, target in test_loader:
            if use_cuda:
                data, target = data.cuda(), target.cuda()
            out = model(data)
            loss += F.nll_loss(out, target, reduction="sum").item()
            correct += out.argmax(dim=1).eq(target).float().sum().item()
    loss = metric_average(loss / len(test_sampler), "avg_loss")
    accuracy = metric_average(correct / len(test_sampler), "avg_accuracy")
    if hvd.rank() == 0:
        print("epoch %d: test loss %.4f, accuracy %.3f on %d worker(s)" % (epoch, loss, accuracy, hvd.size()),
              flush=True)
    return accuracy


for epoch in range(1, args.epochs + 1):
    train(epoch)
    final = test(epoch)
# every rank ends with the same model
weights = torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])
assert torch.equal(hvd.broadcast(weights, root_rank=0), weights), "the ranks' models differ"
if hvd.rank() == 0:
    print("final accuracy %.3f" % final, flush=True)
