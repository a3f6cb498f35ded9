"""hoop.process_sets: process sets, for hoop's numpy API and hoop.torch
alike (horovod.torch's ProcessSet, add_process_set, remove_process_set).

A process set is some ranks of the job. Added on every rank, the ranks in
it get a communicator and an engine of their own, split from the job's;
a collective given process_set= runs among them, in its own order,
beside the job's. hoop and hoop.torch export the same names.
"""
import atexit

from . import _engine
from ._lib import HoopError


def _rank():
    return _engine.state().rank


def _size():
    return _engine.state().size


# What ProcessSet is given for the global set: every rank, however many.
_EVERY_RANK = object()
# The sets added and not removed, by id; and the next id.
_sets = {}
_next_id = [1]


class ProcessSet:
    """horovod.torch's ProcessSet: the ranks (of the job) a collective given
    process_set= runs among. add_process_set() registers it on every rank
    (process_set_id is then set), and the ranks in it get a communicator
    and an engine of their own; a collective on it runs on those, in its
    own order, beside the job's. root_rank and ranks stay the job's ranks;
    results come in the set's rank order (rank())."""

    def __init__(self, ranks_or_comm):
        self._group = None  # the set's engine, on the ranks in it
        if ranks_or_comm is _EVERY_RANK:  # global_process_set
            self._ranks, self.process_set_id = None, 0
            return
        if not isinstance(ranks_or_comm, (list, tuple, range)):
            raise _engine.not_supported("a process set from an MPI communicator (hoop needs no MPI)")
        if any(isinstance(r, bool) or not isinstance(r, int) for r in ranks_or_comm):
            raise ValueError("ProcessSet should be initialized with a list of process ranks")
        self._ranks = sorted(ranks_or_comm)
        self.process_set_id = None

    @property
    def ranks(self):
        """The set's ranks; the global set's are every rank of the job,
        known once init() has run."""
        return list(range(_size())) if self._ranks is None else self._ranks

    def included(self):
        return _rank() in self.ranks

    def size(self):
        """How many ranks the set has; None until it is added."""
        if self.process_set_id is None:
            return None
        return len(self.ranks)

    def rank(self):
        """This process's place in the set (-1 where it is not in it);
        None until the set is added."""
        if self.process_set_id is None:
            return None
        r, ranks = _rank(), self.ranks
        return ranks.index(r) if r in ranks else -1

    def __repr__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s)" % (self.process_set_id, self.ranks)

    __str__ = __repr__


# Every rank of the job: what a collective without process_set runs over.
global_process_set = ProcessSet(_EVERY_RANK)


def add_process_set(process_set):
    """Register a process set (a ProcessSet or a list of ranks) and return
    it. Every rank of the job calls it, with the same ranks, in the same
    order as its other add_process_set and remove_process_set calls; the
    ranks in the set form a communicator of their own. A set of the same
    ranks as one already added is a ValueError, as in Horovod."""
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id is not None:
        raise ValueError("hoop: %s was added already" % ps)
    n = _size()
    ranks = ps.ranks
    if not ranks or len(set(ranks)) != len(ranks) or ranks[0] < 0 or ranks[-1] >= n:
        raise ValueError("hoop: a process set takes distinct ranks of this %d-rank job, not %s" % (n, ranks))
    if any(other._ranks == ranks for other in _sets.values()):
        raise ValueError("Attempted to add a duplicate process set: %s" % ps)
    ps._group = _engine.split(ranks)
    ps.process_set_id = _next_id[0]
    _next_id[0] += 1
    _sets[ps.process_set_id] = ps
    return ps


def remove_process_set(process_set):
    """Unregister a process set added before; every rank of the job calls
    it. Its communicator goes (pending operations on it fail). False for
    the global set or one that was never added."""
    psid = getattr(process_set, "process_set_id", None)
    if not psid or _sets.get(psid) is not process_set:
        return False
    del _sets[psid]
    g, process_set._group = process_set._group, None
    process_set.process_set_id = None
    if g is not None:
        _engine.destroy(g)
    return True


def forget():
    """At shutdown: the sets go with the job (their engines first)."""
    for ps in list(_sets.values()):
        g, ps._group, ps.process_set_id = ps._group, None, None
        if g is not None:
            try:
                _engine.destroy(g)
            except HoopError:
                pass
    _sets.clear()
    _next_id[0] = 1


def checked(process_sets):
    """init(process_sets=...)'s argument, checked before the job is joined:
    the sets to add after, or None ("dynamic", or none given)."""
    if process_sets is None or process_sets == "dynamic":
        return None
    sets = list(process_sets)
    for ps in sets:
        if not isinstance(ps, ProcessSet):
            raise ValueError("hoop: init(process_sets=...) takes ProcessSet objects or \"dynamic\", "
                             "not %r" % (ps,))
    return sets


def add_all(sets):
    """After init: every rank adds the sets checked() gave, in order."""
    for ps in sets or ():
        if ps.process_set_id is None:
            add_process_set(ps)


def group_of(process_set):
    """The engine a collective on process_set runs on: None for the job's
    (no set, or the global one), else the set's, on the ranks in it."""
    if process_set is None:
        return None
    psid = getattr(process_set, "process_set_id", 0)
    if psid == 0:
        return None
    if psid is None:
        raise ValueError("hoop: %s has not been added (add_process_set), or was removed" % (process_set,))
    g = process_set._group
    if g is None:
        raise ValueError("hoop: rank %d is not in %s: only the set's ranks may run its collectives"
                         % (_rank(), process_set))
    return g


def state_of(g):
    """The engine's state: g's, or the job's."""
    return g if g is not None else _engine.state()


# Before the job's engine goes at exit (atexit runs the last registered
# first): a set's engine stops while the job's can still say so.
atexit.register(forget)
