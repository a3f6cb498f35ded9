"""Broadcasting a model's parameters, an optimizer's state and Python
objects, as horovod.torch's functions do."""
import pickle

import torch

from .mpi_ops import allgather, broadcast, broadcast_async_, synchronize
from .. import _engine


def broadcast_parameters(params, root_rank, prefix=None):
    """params: a state_dict, a dict or a list of (name, tensor): each tensor
    is overwritten with root_rank's values."""
    if isinstance(params, dict):
        params = sorted(params.items())
    elif isinstance(params, list):
        params = [p for p in params]
        for p in params:
            if not isinstance(p, tuple) or len(p) != 2:
                raise ValueError("broadcast_parameters: a list must hold (name, tensor) pairs")
    else:
        raise ValueError("broadcast_parameters: invalid params of type %s" % type(params).__name__)
    handles = []
    for name, p in params:
        if p is None:
            continue
        if not torch.is_tensor(p):
            raise ValueError("broadcast_parameters: '%s' is not a tensor" % name)
        handles.append(broadcast_async_(p.data if isinstance(p, torch.nn.Parameter) else p, root_rank,
                                        name=(prefix or "") + "broadcast_parameters." + str(name)))
    for h in handles:
        synchronize(h)


def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """root_rank's obj (anything pickle takes) on every rank."""
    name = name or type(obj).__name__
    ps = process_set
    if _engine.state().rank == root_rank:
        payload = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
        sz = torch.tensor([payload.numel()], dtype=torch.int64)
        broadcast(sz, root_rank, name="broadcast_object." + name + ".size", process_set=ps)
        broadcast(payload, root_rank, name="broadcast_object." + name + ".data", process_set=ps)
        return obj
    sz = broadcast(torch.zeros(1, dtype=torch.int64), root_rank, name="broadcast_object." + name + ".size",
                   process_set=ps)
    payload = broadcast(torch.zeros(int(sz.item()), dtype=torch.uint8), root_rank,
                        name="broadcast_object." + name + ".data", process_set=ps)
    return pickle.loads(payload.numpy().tobytes())


def allgather_object(obj, name=None, process_set=None):
    """Every rank's obj (of process_set's ranks), in rank order."""
    name = name or type(obj).__name__
    data = pickle.dumps(obj)
    payload = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    sizes = allgather(torch.tensor([len(data)], dtype=torch.int64), name="allgather_object." + name + ".sizes",
                      process_set=process_set)
    gathered = allgather(payload, name="allgather_object." + name + ".data",
                         process_set=process_set).numpy().tobytes()
    out, at = [], 0
    for s in sizes.tolist():
        out.append(pickle.loads(gathered[at:at + s]))
        at += s
    return out


def _create_state(optimizer, model):
    """horovod.torch's way to give a new optimizer its state: a step with
    zero gradients (sparse ones where its optimizer needs them; model names
    the sparse embeddings). A DistributedOptimizer takes its wrapped
    optimizer's step, which reduces nothing: ranks may differ here."""
    from .optimizer import _DistributedOptimizer
    sparse = set()
    if model is not None:
        for m in model.modules():
            if isinstance(m, torch.nn.Embedding) and m.sparse:
                sparse.update(id(p) for p in m.parameters())
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = p.data.new(p.size()).zero_()
                if isinstance(optimizer, torch.optim.SparseAdam) or \
                        (isinstance(optimizer, torch.optim.SGD) and id(p) in sparse):
                    p.grad = p.grad.to_sparse()
    if type(optimizer).__module__ == _DistributedOptimizer.__module__:
        super(type(optimizer), optimizer).step()
    else:
        optimizer.step()


def broadcast_optimizer_state(optimizer, root_rank, model=None, prefix=None):
    """root_rank's optimizer state (every param group's settings and each
    parameter's state, e.g. momentum buffers) on every rank. As
    horovod.torch, a rank whose optimizer has no state yet first creates
    it with a step of zero gradients (so each parameter that requires one
    is left a zero gradient, and weight decay applies once); model marks
    the sparse embeddings for that step."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if not optimizer.state_dict()["state"]:
        _create_state(optimizer, model)
    state = optimizer.state_dict()
    state = broadcast_object(state, root_rank, name=(prefix or "") + "broadcast_optimizer_state")
    if _engine.state().rank != root_rank:
        optimizer.load_state_dict(state)
