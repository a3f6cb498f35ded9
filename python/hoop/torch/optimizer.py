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


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, groups, sparse_as_dense):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        self.sparse_as_dense = sparse_as_dense
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [("allreduce.noname.%s" % i, v)
                                for group in self.param_groups for i, v in enumerate(group["params"])]
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
        self._allreduce_delay = {v: backward_passes_per_step for _, v in sorted(named_parameters)}
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self._handles = {}
        self._filled = set()  # parameters given a zero gradient this step (none computed here)
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True
        # groups: an int (that many groups of parameters) or lists of parameters
        self._group_of = {}
        self._groups = []
        if groups is not None:
            params_list = [v for group in self.param_groups for v in group["params"] if v.requires_grad]
            if isinstance(groups, int):
                if groups <= 0:
                    raise ValueError("groups must be a positive int or a list of lists of parameters")
                k = groups
                self._groups = [params_list[i::k] for i in range(k) if params_list[i::k]]
            elif isinstance(groups, list):
                self._groups = [list(g) for g in groups]
            else:
                raise ValueError("groups must be a positive int or a list of lists of parameters")
            for gi, g in enumerate(self._groups):
                for p in g:
                    self._group_of[p] = gi
        self._group_ready = {}
        self._register_hooks()

    def _register_hooks(self):
        post_hook = hasattr(torch.Tensor, "register_post_accumulate_grad_hook")
        for group in self.param_groups:
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                self._requires_update.add(p)
                if post_hook:
                    p.register_post_accumulate_grad_hook(self._make_post_hook())
                else:
                    p_tmp = p.expand_as(p)
                    grad_acc = p_tmp.grad_fn.next_functions[0][0]
                    grad_acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(grad_acc)

    def _scales(self):
        if self.op == Average:
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # Not computed here (a dynamic graph), but maybe on another rank.
            p.grad = p.data.new(p.size()).zero_()
            self._filled.add(p)
        name = self._parameter_names.get(p)
        if p.grad.is_sparse:
            if not self.sparse_as_dense:
                # Gathered, not reduced (horovod.torch's way); not compressed.
                return sparse_allreduce_async(p.grad, name=name, op=self.op), (None, _SPARSE)
            p.grad = p.grad.to_dense()
        tensor_compressed, ctx = self._compression.compress(p.grad)
        pre, post = self._scales()
        handle = allreduce_async_(tensor_compressed, name=name, op=self.op, prescale_factor=pre,
                                  postscale_factor=post)
        return handle, (tensor_compressed, ctx)

    def _grouped_allreduce_async(self, gi):
        ps = self._groups[gi]
        for p in ps:
            if p.grad is None:
                p.grad = p.data.new(p.size()).zero_()
            elif p.grad.is_sparse:  # a group is one dense allreduce
                p.grad = p.grad.to_dense()
        pairs = [self._compression.compress(p.grad) for p in ps]
        pre, post = self._scales()
        handle = grouped_allreduce_async_([t for t, _ in pairs], name="grouped.%s" % self._parameter_names[ps[0]],
                                          op=self.op, prescale_factor=pre, postscale_factor=post)
        return handle, pairs

    def _ready(self, p):
        if p in self._handles and self._handles[p][0] is not None:
            if self._allreduce_delay[p] <= 0:
                raise AssertionError(
                    "Gradients were computed more than backward_passes_per_step times before call to "
                    "step(). Increase backward_passes_per_step to accumulate gradients locally.")
        assert not p.grad.requires_grad
        assert self._allreduce_delay[p] > 0
        self._allreduce_delay[p] -= 1
        if self._allreduce_delay[p] == 0:
            gi = self._group_of.get(p)
            if gi is None:
                self._handles[p] = self._allreduce_grad_async(p)
                return
            ready = self._group_ready.setdefault(gi, set())
            ready.add(p)
            if len(ready) == len(self._groups[gi]):
                handle, pairs = self._grouped_allreduce_async(gi)
                for q, pair in zip(self._groups[gi], pairs):
                    self._handles[q] = (handle, pair)
                self._group_ready[gi] = set()
            else:
                self._handles[p] = (None, None)

    def _make_hook(self, p):
        def hook(*ignore):
            self._ready(p)
        return hook

    def _make_post_hook(self):
        def hook(p):
            self._ready(p)
        return hook

    def synchronize(self):
        """Wait for every gradient's allreduce (starting those whose hook has
        not run on this rank) and write the results into the gradients."""
        missing = [p for p in self._requires_update if p not in self._handles]
        for p in sorted(missing, key=lambda q: self._parameter_names[q]):
            gi = self._group_of.get(p)
            if gi is None:
                self._handles[p] = self._allreduce_grad_async(p)
        # Groups not complete yet: start them with what they have.
        for gi, g in enumerate(self._groups):
            if any(self._handles.get(p, (None, None))[0] is None for p in g):
                handle, pairs = self._grouped_allreduce_async(gi)
                for q, pair in zip(g, pairs):
                    self._handles[q] = (handle, pair)
                self._group_ready[gi] = set()
        done = {}
        try:
            for p, (handle, (tensor, ctx)) in self._handles.items():
                if handle is None:
                    continue
                if id(handle) not in done:
                    try:
                        done[id(handle)] = synchronize(handle)
                    except HoopMismatchError as e:
                        if ctx is not _SPARSE and p not in self._filled:
                            raise
                        raise HoopMismatchError(
                            "%s. The gradient of '%s' is sparse on some ranks and dense or missing on "
                            "others (a parameter that a rank's forward did not use gets a dense zero "
                            "gradient there): pass sparse_as_dense=True to DistributedOptimizer"
                            % (str(e).rstrip("."), self._parameter_names.get(p)), e.status) from e
                if ctx is _SPARSE:
                    p.grad = done[id(handle)]  # the sparse sum
                    continue
                out = self._compression.decompress(tensor, ctx)
                if out.data_ptr() != p.grad.data_ptr():
                    p.grad.copy_(out)
        finally:
            # After a failure too: the next backward starts afresh.
            for p in self._handles:
                self._allreduce_delay[p] = self.backward_passes_per_step
            self._handles.clear()
            self._filled.clear()
            self._group_ready = {}
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
        if self._handles:
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
    if process_set is not None and getattr(process_set, "process_set_id", 0) != 0:
        raise _engine.not_supported("process sets (every collective spans the whole job)")
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups:
        warnings.warn("num_groups is deprecated; use groups")
        if groups is None:
            groups = num_groups
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
               gradient_predivide_factor, groups, sparse_as_dense)
