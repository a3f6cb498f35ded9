"""DistributedOptimizer: allreduce each gradient as soon as backward has
produced it, wait for all of them in step(), as horovod.torch's does."""
import contextlib
import warnings

import torch

from .compression import Compression
from .mpi_ops import allreduce_async_, grouped_allreduce_async_, sparse_allreduce_async, synchronize
from .. import Average, Adasum, HoopMismatchError, _engine


# The context of a sparse gradient's handle: its result replaces the gradient.
_SPARSE = object()
# The entry of a group's member whose group has not started yet.
_WAITING = (None, None, None)
# No result yet (None is a result: an in-place allreduce's).
_NONE = object()


class _Slot:
    """A parameter's state in the optimizer. entry: None until its
    allreduce starts this step, then (handle, tensor handed over, its
    compression context); _WAITING while its group waits for the others."""

    __slots__ = ("p", "name", "delay", "entry", "group", "filled")

    def __init__(self, p, name, delay):
        self.p, self.name, self.delay = p, name, delay
        self.entry = self.group = None
        self.filled = False  # given a zero gradient this step (none computed here)


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, groups, sparse_as_dense, process_set=None):
        super(self.__class__, self).__init__(params)
        # None for every rank's (the fast path); a set's ranks alone reduce
        # over it, the others step on their own gradients (horovod.torch's)
        self._ps = None if process_set is None or process_set.process_set_id == 0 else process_set
        self._outside = self._ps is not None and not self._ps.included()
        self._compression = compression
        self.sparse_as_dense = sparse_as_dense
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            # as horovod.torch names them: by group, then by place in it
            named_parameters = [("allreduce.noname.%d.%d" % (i, j), v)
                                for i, group in enumerate(self.param_groups) for j, v in enumerate(group["params"])]
        if any(not isinstance(p, tuple) for p in named_parameters):
            raise ValueError("named_parameters should be a sequence of tuples (name, parameter), usually "
                             "produced by model.named_parameters().")
        names = [k for k, _ in named_parameters]
        dups = sorted({k for k in names if names.count(k) > 1})
        if dups:
            raise ValueError("Parameter names in named_parameters must be unique. Found duplicates: %s"
                             % ", ".join(dups))
        all_ids = {id(v) for group in self.param_groups for v in group["params"]}
        named_ids = {id(v) for _, v in named_parameters}
        if all_ids - named_ids:
            raise ValueError("named_parameters was specified, but one or more model parameters were not "
                             "named. Python object ids: %s" % ", ".join(str(i) for i in sorted(all_ids - named_ids)))
        self._parameter_names = {v: k for k, v in sorted(named_parameters)}
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self._synchronized = False
        self._should_synchronize = True
        # One slot per parameter that takes a gradient; its hook holds it.
        # The path every gradient takes looks nothing up by tensor (a
        # tensor's hash is a Python call: a dozen a gradient added 1-2 us).
        self._slots = []
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    self._slots.append(_Slot(p, self._parameter_names.get(p), backward_passes_per_step))
        self._slots_by_name = sorted(self._slots, key=lambda sl: sl.name)
        self._started = []  # slots given an entry this step, in that order
        # groups: an int (that many groups of parameters) or lists of parameters
        self._groups = []
        if groups is not None:
            if isinstance(groups, int):
                if groups <= 0:
                    raise ValueError("groups must be a positive int or a list of lists of parameters")
                self._groups = [self._slots[i::groups] for i in range(groups) if self._slots[i::groups]]
            elif isinstance(groups, list):
                slot_of = {id(sl.p): sl for sl in self._slots}
                seen = set()
                for g in groups:
                    for p in g:
                        if not isinstance(p, torch.Tensor):
                            raise ValueError("groups must consist of torch.Tensor.")
                        if id(p) in seen:
                            raise ValueError("A parameter can only appear once in groups.")
                        seen.add(id(p))
                # A parameter that takes no gradient has no hook to wait for.
                self._groups = [m for m in ([slot_of[id(p)] for p in g if id(p) in slot_of] for g in groups) if m]
            else:
                raise ValueError("groups must be a positive int or a list of lists of parameters")
            for gi, g in enumerate(self._groups):
                for sl in g:
                    sl.group = gi
        self._group_ready = [0] * len(self._groups)
        if not self._outside:
            self._register_hooks()

    def _register_hooks(self):
        self._grad_accs = []
        post_hook = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")
        for sl in self._slots:
            if post_hook:
                sl.p.register_post_accumulate_grad_hook(self._make_post_hook(sl))
            else:
                p_tmp = sl.p.expand_as(sl.p)
                grad_acc = p_tmp.grad_fn.next_functions[0][0]
                grad_acc.register_hook(self._make_hook(sl))
                self._grad_accs.append(grad_acc)

    def _scales(self):
        if self.op == Average:
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _dense_grad(self, sl):
        """The slot's gradient, a zero one where this rank computed none (a
        dynamic graph: another rank may have)."""
        p = sl.p
        if p.grad is None:
            p.grad = p.data.new(p.size()).zero_()
            sl.filled = True
        return p.grad

    def _start(self, sl, entry):
        if sl.entry is None:
            self._started.append(sl)
        sl.entry = entry

    def _allreduce_grad_async(self, sl):
        grad = self._dense_grad(sl)
        if grad.is_sparse:
            if not self.sparse_as_dense:
                # Gathered, not reduced (horovod.torch's way); not compressed.
                self._start(sl, (sparse_allreduce_async(grad, name=sl.name, op=self.op, process_set=self._ps),
                                 None, _SPARSE))
                return
            grad = grad.to_dense()  # reduced dense; the gradient stays sparse (synchronize)
        tensor_compressed, ctx = self._compression.compress(grad)
        pre, post = self._scales()
        handle = allreduce_async_(tensor_compressed, name=sl.name, op=self.op, prescale_factor=pre,
                                  postscale_factor=post, process_set=self._ps)
        self._start(sl, (handle, tensor_compressed, ctx))

    def _grouped_allreduce_async(self, gi):
        g = self._groups[gi]
        grads = []
        for sl in g:
            grad = self._dense_grad(sl)
            if grad.is_sparse:  # a group is one dense allreduce; the gradient stays sparse
                grad = grad.to_dense()
            grads.append(grad)
        pairs = [self._compression.compress(grad) for grad in grads]
        pre, post = self._scales()
        handle = grouped_allreduce_async_([t for t, _ in pairs], name="grouped.%s" % g[0].name, op=self.op,
                                          prescale_factor=pre, postscale_factor=post, process_set=self._ps)
        for sl, (t, ctx) in zip(g, pairs):
            self._start(sl, (handle, t, ctx))
        self._group_ready[gi] = 0

    def _ready(self, sl):
        if sl.entry is not None and sl.entry[0] is not None:
            if sl.delay <= 0:
                raise AssertionError(
                    "Gradients were computed more than backward_passes_per_step times before call to "
                    "step(). Increase backward_passes_per_step to accumulate gradients locally.")
        assert not sl.p.grad.requires_grad
        assert sl.delay > 0
        sl.delay -= 1
        if sl.delay == 0:
            gi = sl.group
            if gi is None:
                self._allreduce_grad_async(sl)
                return
            self._group_ready[gi] += 1
            if self._group_ready[gi] == len(self._groups[gi]):
                self._grouped_allreduce_async(gi)
            else:
                self._start(sl, _WAITING)

    def _make_hook(self, sl):
        def hook(*ignore):
            self._ready(sl)
        return hook

    def _make_post_hook(self, sl):
        def hook(p):
            self._ready(sl)
        return hook

    def synchronize(self):
        """Wait for every gradient's allreduce (starting those whose hook has
        not run on this rank) and write the results into the gradients."""
        if self._outside:  # not in the optimizer's process set: nothing to reduce
            self._synchronized = True
            return
        for sl in self._slots_by_name:
            if sl.entry is None and sl.group is None:
                self._allreduce_grad_async(sl)
        # Groups not complete yet: start them with what they have.
        for gi, g in enumerate(self._groups):
            if any(sl.entry is None or sl.entry[0] is None for sl in g):
                self._grouped_allreduce_async(gi)
        done = {}
        try:
            for sl in self._started:
                handle, tensor, ctx = sl.entry
                # A group's members share one handle: waited for once.
                result = done.get(id(handle), _NONE) if sl.group is not None else _NONE
                if result is _NONE:
                    try:
                        result = synchronize(handle)
                        if sl.group is not None:
                            done[id(handle)] = result
                    except HoopMismatchError as e:
                        if ctx is not _SPARSE and not sl.filled:
                            raise
                        raise HoopMismatchError(
                            "%s. The gradient of '%s' is sparse on some ranks and dense or missing on "
                            "others (a parameter that a rank's forward did not use gets a dense zero "
                            "gradient there): pass sparse_as_dense=True to DistributedOptimizer"
                            % (str(e).rstrip("."), sl.name), e.status) from e
                if ctx is _SPARSE:
                    sl.p.grad = result  # the sparse sum
                    continue
                out = self._compression.decompress(tensor, ctx)
                grad = sl.p.grad
                if grad.is_sparse:
                    # sparse_as_dense: reduced dense, handed back sparse, as
                    # horovod.torch does (SparseAdam takes sparse gradients only)
                    grad.zero_().add_(out.to_sparse())
                elif out is not grad and out.data_ptr() != grad.data_ptr():
                    grad.copy_(out)
        finally:
            # After a failure too: the next backward starts afresh.
            bpps = self.backward_passes_per_step
            for sl in self._started:
                sl.delay = bpps
                sl.entry = None
                sl.filled = False
            self._started = []
            self._group_ready = [0] * len(self._groups)
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For a step() after an explicit synchronize() (e.g. to clip the
        gradients in between)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). This can cause training slowdown. You may want to "
                              "consider using optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._started:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(). This is prohibited as it can "
                                 "cause a race condition.")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=None):
    """Wrap optimizer so that every gradient is averaged (op) over the ranks
    before step() applies it; the allreduces start during backward."""
    if op == Adasum:
        raise _engine.not_supported("Adasum (DistributedOptimizer with op=Adasum)")
    if process_set is not None and getattr(process_set, "process_set_id", 0) is None:
        raise ValueError("hoop: DistributedOptimizer: %s has not been added (add_process_set)" % (process_set,))
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups:
        warnings.warn("num_groups is deprecated; use groups")
        if groups is None:
            groups = num_groups
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
               gradient_predivide_factor, groups, sparse_as_dense, process_set)
