"""SyncBatchNorm: batch normalization whose statistics are those of the
whole batch, every rank's shard together (as horovod.torch.SyncBatchNorm)."""
import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from .mpi_ops import allreduce_async_, synchronize
from .. import Sum, _engine


def _sum_over_ranks(t):
    return synchronize(allreduce_async_(t, op=Sum, name=_engine.auto_name("sync_batch_norm", None)))


class _SyncBatchNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum):
        c = x.shape[1]
        dims = [d for d in range(x.dim()) if d != 1]
        shape = [1, c] + [1] * (x.dim() - 2)
        xd = x.detach().double()
        count = torch.tensor([x.numel() / c], dtype=torch.float64, device=x.device)
        stats = torch.cat([xd.sum(dims), (xd * xd).sum(dims), count])
        stats = _sum_over_ranks(stats)
        total = stats[-1].item()
        if total <= 1:
            raise ValueError("SyncBatchNorm: expected more than 1 value per channel over every rank, got %d"
                             % int(total))
        mean = stats[:c] / total
        var = (stats[c:2 * c] / total - mean * mean).clamp_min(0)
        if running_mean is not None:
            running_mean.mul_(1 - momentum).add_(momentum * mean.to(running_mean.dtype))
            running_var.mul_(1 - momentum).add_(momentum * (var * total / (total - 1)).to(running_var.dtype))
        invstd = (var + eps).rsqrt()
        xhat = ((xd - mean.view(shape)) * invstd.view(shape)).to(x.dtype)
        out = xhat
        if weight is not None:
            out = out * weight.view(shape) + bias.view(shape)
        ctx.save_for_backward(xhat, weight, invstd.to(x.dtype))
        ctx.total, ctx.dims, ctx.shape = total, dims, shape
        return out

    @staticmethod
    def backward(ctx, g):
        xhat, weight, invstd = ctx.saved_tensors
        dims, shape, c = ctx.dims, ctx.shape, xhat.shape[1]
        sum_dy = g.sum(dims)
        sum_dy_xhat = (g * xhat).sum(dims)
        both = _sum_over_ranks(torch.cat([sum_dy, sum_dy_xhat]).double())
        mean_dy = (both[:c] / ctx.total).to(g.dtype)
        mean_dy_xhat = (both[c:] / ctx.total).to(g.dtype)
        scale = invstd if weight is None else invstd * weight
        dx = scale.view(shape) * (g - mean_dy.view(shape) - xhat * mean_dy_xhat.view(shape))
        dw = sum_dy_xhat if weight is not None else None
        db = sum_dy if weight is not None else None
        return dx, dw, db, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """BatchNorm over every rank's batch in training; in eval, the running
    statistics as torch.nn.BatchNorm does. The weight and bias gradients
    are this rank's (DistributedOptimizer averages them)."""

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got %dD input)" % input.dim())

    def forward(self, input):
        self._check_input_dim(input)
        if not self.training:
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight, self.bias, False,
                                0.0, self.eps)
        momentum = self.momentum if self.momentum is not None else 0.0
        if self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked += 1
            if self.momentum is None:
                momentum = 1.0 / float(self.num_batches_tracked)
        rm = self.running_mean if self.track_running_stats else None
        rv = self.running_var if self.track_running_stats else None
        return _SyncBatchNormFn.apply(input, self.weight, self.bias, rm, rv, self.eps, momentum)
