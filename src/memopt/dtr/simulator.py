"""DTR trace replay with simrd's semantics (Kirisame et al., ICLR 2021; uwsampl/dtr-prototype).

Two runtimes of simrd are reproduced:

* :func:`baseline` -- ``RuntimeV1`` with an infinite budget, as simrd's experiments run it
  to get the reference point: ``baseline_peak`` is its ``max_memory`` (memory after each
  operator allocates its outputs; a storage is freed -- "banished" -- when its last
  external reference is released) and ``baseline_compute`` its ``model_compute``.
* :func:`replay` -- ``RuntimeV2EagerOptimized`` under a budget: an operator first locks
  its arguments, rematerializing evicted ones recursively (depth first, in argument
  order), then evicts storages chosen by the heuristic until its outputs fit, runs
  (clock += cost; siblings that were still resident are freed again), unlocks. A storage
  whose last reference is released is evicted at once (eager eviction) but stays
  rematerializable; constants and outputs are pinned. If the pool of evictable storages
  is empty the run fails with ``OOM``; if the rematerialization compute exceeds
  ``baseline_compute * (overhead_limit - 1)`` it fails with ``thrash``.

The work happens in :mod:`memopt.dtr._kernels` (numba); this module prepares its arrays,
serves user-defined heuristics and bigger buffers when the kernel asks, and packages the
outcome. Results equal simrd's field by field: ``status``, ``clock`` (starts at 1),
``model_compute``, ``remat_compute``, ``max_memory``, ``heuristic_evals``.

When simrd itself would stop on a failed assertion (its incremental regions can go
stale on unusual logs, e.g. an absorb into a region whose frontier lacks the evicted
storage), :func:`replay` raises :class:`memopt.errors.FormatError` saying so, at the
same point of the run; it never returns an outcome simrd could not have produced.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from memopt.dtr import _kernels as K
from memopt.dtr.heuristics import (FEATURE_EQCLASS, FEATURE_REGIONS, Heuristic, StorageView,
                                   resolve_heuristic)
from memopt.dtr.trace import SCHED_COMPUTE, SCHED_GET, SCHED_RELEASE, Trace, load_trace
from memopt.errors import FormatError, OptionError

__all__ = ["Baseline", "ReplayResult", "ReplayLog", "Eviction", "Remat", "OOMInfo",
           "baseline", "replay", "replay_ratio"]

_INT64_MAX = np.iinfo(np.int64).max
#: Budgets are byte counts below 2**62, like every size (docs/formats.md, "Limits").
MAX_BUDGET = 2**62


def _number(value, what: str) -> float | int:
    """``value`` as a Python number; an :class:`OptionError` naming ``what`` otherwise."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OptionError(f"{what} must be a number, got {type(value).__name__} {_show(value)}")
    if isinstance(value, float) and math.isnan(value):
        raise OptionError(f"{what} must be a number, got nan")
    return value


def _show(value) -> str:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        return f"{float(value):.3e}" if value.bit_length() < 1000 else "a huge integer"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_budget(budget, what: str = "budget") -> int:
    budget = _number(budget, what)
    if isinstance(budget, float):
        if not math.isfinite(budget):
            raise OptionError(f"{what} must be a finite number of bytes, got {_show(budget)}")
        if budget >= MAX_BUDGET:
            raise OptionError(f"{what} {_show(budget)} is beyond memopt's exact limit of 2**62 bytes")
        budget = int(budget)   # simrd's int(): a fractional budget is truncated
    if budget < 0:
        raise OptionError(f"negative {what} {_show(budget)}")
    if budget >= MAX_BUDGET:
        raise OptionError(f"{what} {_show(budget)} is beyond memopt's exact limit of 2**62 bytes")
    return budget


def _check_trace_limits(trace: Trace) -> None:
    """A trace built by :func:`load_trace` holds these already; re-checked for any other
    :class:`Trace` so that no int64 sum of the replay can wrap around."""
    if sum(trace.s_size.tolist()) >= 2**62 or int(trace.s_size.min(initial=0)) < 0:
        raise FormatError(f"{trace.name}: the storage sizes add up to 2**62 bytes or more, beyond "
                          "memopt's exact limit (live bytes must fit in int64)")
    if sum(c * n for c, n in zip(trace.op_cost.tolist(), trace.op_nout.tolist())) >= 2**60 or int(trace.op_cost.min(initial=0)) < 0:
        raise FormatError(f"{trace.name}: the operator costs add up to 2**60 or more, beyond "
                          "memopt's exact limit")


@dataclass(frozen=True)
class Baseline:
    """simrd's ``RuntimeV1`` run with an infinite budget."""

    peak: int       # max_memory (bytes)
    compute: int    # model_compute (sum of operator costs)
    const_memory: int  # bytes of constants (simrd's model_const_memory)

    def to_dict(self) -> dict:
        return {"peak": self.peak, "compute": self.compute, "const_memory": self.const_memory}

    @classmethod
    def from_dict(cls, doc: dict) -> "Baseline":
        """Inverse of :meth:`to_dict`."""
        try:
            return cls(peak=int(doc["peak"]), compute=int(doc["compute"]), const_memory=int(doc["const_memory"]))
        except (KeyError, TypeError, ValueError) as exc:
            from memopt.errors import FormatError

            raise FormatError(f"not a DTR baseline: {type(exc).__name__}: {exc}") from None


@dataclass(frozen=True)
class Eviction:
    """The heuristic evicted ``tensor``'s storage while making room for ``op``."""

    seq: int            # position among all logged events
    step: int           # index in the replay schedule
    instruction: int    # 0-based index of the trace record being executed
    op: str             # operator being materialized (simrd's unique name ``NAME/k``)
    tensor: str         # root tensor of the evicted storage
    size: int
    score: float
    depth: int          # rematerialization depth of ``op`` (0 = the scheduled operator)


@dataclass(frozen=True)
class Remat:
    """``tensor`` was recomputed by ``op`` at the given recursion depth."""

    seq: int
    step: int
    instruction: int
    op: str
    tensor: str
    depth: int
    size: int           # bytes allocated by the recomputation


@dataclass(frozen=True)
class OOMInfo:
    """Where a replay ran out of memory."""

    step: int
    instruction: int
    op: str
    requested: int        # bytes the operator allocates
    budget: int
    memory: int           # bytes in use
    available: int        # budget - memory
    short: int            # memory + requested - budget
    cascade: tuple[str, ...]   # tensors being materialized, outermost first
    locked: tuple[str, ...]    # root tensors of locked (argument) storages, not pinned
    pinned: int                # number of pinned storages
    pinned_bytes: int


@dataclass(frozen=True)
class ReplayLog:
    """Ordered record of one replay (``replay(..., record=True)``)."""

    events: tuple = ()          # Eviction and Remat, in order
    oom: OOMInfo | None = None

    @property
    def evictions(self) -> list[Eviction]:
        return [e for e in self.events if isinstance(e, Eviction)]

    @property
    def remats(self) -> list[Remat]:
        return [e for e in self.events if isinstance(e, Remat)]


@dataclass(frozen=True)
class ReplayResult:
    """Outcome of one replay, field for field what simrd reports."""

    status: str             # 'pass' | 'OOM' | 'thrash'
    budget: int
    baseline_peak: int
    baseline_compute: int
    clock: int
    model_compute: int
    remat_compute: int
    max_memory: int
    heuristic_evals: int
    heuristic: str = "dtr"
    overhead_limit: float | None = None
    ratio: float | None = None
    log: ReplayLog | None = field(default=None, compare=False, repr=False)

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @property
    def overhead(self) -> float:
        """clock / baseline_compute, as simrd's experiments report it."""
        return self.clock / self.baseline_compute if self.baseline_compute else math.inf

    def to_dict(self) -> dict:
        return {
            "status": self.status, "budget": self.budget, "ratio": self.ratio,
            "heuristic": self.heuristic, "overhead_limit": self.overhead_limit,
            "baseline_peak": self.baseline_peak, "baseline_compute": self.baseline_compute,
            "clock": self.clock, "model_compute": self.model_compute,
            "remat_compute": self.remat_compute, "max_memory": self.max_memory,
            "heuristic_evals": self.heuristic_evals,
        }

    @classmethod
    def from_dict(cls, doc: dict) -> "ReplayResult":
        """Inverse of :meth:`to_dict` (the replay log is not part of it)."""
        try:
            limit, ratio = doc.get("overhead_limit"), doc.get("ratio")
            return cls(status=str(doc["status"]), budget=int(doc["budget"]),
                       baseline_peak=int(doc["baseline_peak"]), baseline_compute=int(doc["baseline_compute"]),
                       clock=int(doc["clock"]), model_compute=int(doc["model_compute"]),
                       remat_compute=int(doc["remat_compute"]), max_memory=int(doc["max_memory"]),
                       heuristic_evals=int(doc["heuristic_evals"]), heuristic=str(doc.get("heuristic", "dtr")),
                       overhead_limit=None if limit is None else float(limit),
                       ratio=None if ratio is None else float(ratio))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            from memopt.errors import FormatError

            raise FormatError(f"not a DTR replay result: {type(exc).__name__}: {exc}") from None


def _as_trace(trace) -> Trace:
    return trace if isinstance(trace, Trace) else load_trace(trace)


def baseline(trace) -> Baseline:
    """simrd's ``RuntimeV1(math.inf, ...)`` run: peak memory and compute (cached per trace).

    Parameters
    ----------
    trace : Trace

    Returns
    -------
    Baseline
        ``peak`` (bytes), ``compute`` (the log's time units), ``const_memory``.

    Raises
    ------
    FormatError
        Sizes or costs beyond exact int64 arithmetic.

    Examples
    --------
    >>> from memopt.dtr.trace import parse_lines
    >>> tr = parse_lines(['{"INSTRUCTION": "CONSTANT", "NAME": "x"}',
    ...                   '{"INSTRUCTION": "MEMORY", "NAME": "x", "MEMORY": 4}'])
    >>> baseline(tr).peak
    4
    """
    trace = _as_trace(trace)
    if trace._baseline is not None:
        return trace._baseline
    _check_trace_limits(trace)
    kind, arg = trace.sched_kind.tolist(), trace.sched_arg.tolist()
    t_storage = trace.t_storage.tolist()
    s_size = trace.s_size.tolist()
    s_root = trace.s_root.tolist()
    op_out, op_nout = trace.op_out_start.tolist(), trace.op_nout.tolist()
    op_total, op_cost = trace.op_total_size.tolist(), trace.op_cost.tolist()
    ref = [0] * len(s_size)
    material = [False] * len(s_size)
    mem = peak = compute = const = 0
    for k, a in zip(kind, arg):
        if k == SCHED_COMPUTE:
            for t in range(op_out[a], op_out[a] + op_nout[a]):
                s = t_storage[t]
                ref[s] += 1
                if s_root[s] == t:
                    material[s] = True
                    if trace.op_is_const[a]:
                        const += s_size[s]
            compute += op_cost[a]
            mem += op_total[a]
            peak = max(peak, mem)
        elif k == SCHED_GET:
            ref[t_storage[a]] += 1
        elif k == SCHED_RELEASE:
            s = t_storage[a]
            ref[s] -= 1
            if ref[s] == 0 and material[s]:     # _try_banish_V1
                material[s] = False
                mem -= s_size[s]
    result = Baseline(peak=peak, compute=compute, const_memory=const)
    trace._baseline = result
    return result


class _State:
    """Arrays of one replay, in the kernel's argument order."""

    def __init__(self, trace: Trace, budget: int, limit: int, heur: Heuristic, record: bool,
                 resident: np.ndarray):
        n_s, n_t = trace.n_storages, trace.n_tensors
        self.trace = trace
        self.heur = heur
        use_regions = FEATURE_REGIONS in heur.features
        use_eq = FEATURE_EQCLASS in heur.features
        self.pa = np.zeros(K.PA_NPA, dtype=np.int64)
        self.pa[K.PA_BUDGET] = budget
        self.pa[K.PA_LIMIT] = limit
        self.pa[K.PA_HEUR] = heur.code
        self.pa[K.PA_REGIONS] = int(use_regions)
        self.pa[K.PA_EQ] = int(use_eq)
        self.pa[K.PA_RECORD] = int(record)
        self.sc = np.zeros(K.SC_NSC, dtype=np.int64)
        self.sc[K.SC_CLOCK] = 1
        self.sc[K.SC_VICTIM] = -1
        i64 = np.int64
        self.t_defined = np.zeros(n_t, dtype=np.bool_)
        self.s_material = np.zeros(n_s, dtype=np.bool_)
        self.s_ref_int = np.zeros(n_s, dtype=i64)
        self.s_ref_ext = np.zeros(n_s, dtype=i64)
        self.s_pinned = np.zeros(n_s, dtype=np.bool_)
        self.s_la = np.full(n_s, K.LA_NEG_INF, dtype=i64)
        self.s_compute = np.zeros(n_s, dtype=i64)
        self.s_lastop = np.full(n_s, -1, dtype=i64)
        self.pool = np.full(2 * n_s + 16, -1, dtype=i64)
        self.pool_pos = np.full(n_s, -1, dtype=i64)
        words = max(1, (n_s + 63) // 64)
        max_nout = int(trace.op_nout.max()) if trace.n_ops else 1
        nslots = min(n_s + max_nout + 1, 256) if use_regions else 1
        self.s_slot = np.full(n_s, -1, dtype=i64)
        self.slot_free = np.arange(nslots, dtype=i64)
        self.sc[K.SC_SLOT_FREE] = nslots if use_regions else 0
        self.reg_bits = np.zeros((nslots, 4, words), dtype=np.uint64)
        self.reg_comp = np.zeros((nslots, 2), dtype=i64)
        self.tmp_bits = np.zeros((2, words), dtype=np.uint64)
        self.dfs = np.zeros(n_s + 1, dtype=i64)
        self.ecn = np.full(n_s, -1, dtype=i64)
        nnodes = n_s + 1024 if use_eq else 1
        self.uf_parent = np.full(nnodes, -1, dtype=i64)
        self.uf_value = np.zeros(nnodes, dtype=i64)
        self.uf_mark = np.zeros(nnodes, dtype=i64)
        self.fr_t = np.zeros(n_t + 1, dtype=i64)
        self.fr_remat = np.zeros(n_t + 1, dtype=i64)
        self.fr_phase = np.zeros(n_t + 1, dtype=i64)
        self.fr_i = np.zeros(n_t + 1, dtype=i64)
        self.fr_uend = np.zeros(n_t + 1, dtype=i64)
        nargs = np.diff(trace.op_arg_start)
        self.ulist = np.zeros(int(np.sum(nargs[trace.t_op])) + 1, dtype=i64)
        nev = 4096 if record else 1
        self._alloc_events(nev)
        self.out_score = np.zeros(1, dtype=np.float64)
        self.tmp_def = np.zeros(max_nout + 1, dtype=i64)
        self.rs_buf = np.zeros(max_nout + 1, dtype=i64)
        self.score_buf = np.zeros(len(self.pool), dtype=np.float64)
        self.s_resident = resident

    def _alloc_events(self, n, old=None):
        names = ("ev_kind", "ev_step", "ev_record", "ev_op", "ev_subject", "ev_size",
                 "ev_depth")
        for name in names:
            new = np.zeros(n, dtype=np.int64)
            if old is not None:
                new[:len(getattr(self, name))] = getattr(self, name)
            setattr(self, name, new)
        new = np.zeros(n, dtype=np.float64)
        if old is not None:
            new[:len(self.ev_score)] = self.ev_score
        self.ev_score = new

    def grow(self):
        what = int(self.sc[K.SC_GROW])
        if what == 1:       # region slots
            old = self.reg_bits.shape[0]
            # the kernel asks for one free slot per output of the operator it is about to
            # run; with n_storages + max outputs slots that always fits
            new = min(max(2 * old, 16), self.trace.n_storages + len(self.rs_buf))
            if new <= old:
                raise AssertionError("region slots cannot grow further")
            bits = np.zeros((new, 4, self.reg_bits.shape[2]), dtype=np.uint64)
            bits[:old] = self.reg_bits
            comp = np.zeros((new, 2), dtype=np.int64)
            comp[:old] = self.reg_comp
            free = np.zeros(new, dtype=np.int64)
            nfree = int(self.sc[K.SC_SLOT_FREE])
            free[:nfree] = self.slot_free[:nfree]
            free[nfree:nfree + new - old] = np.arange(old, new)
            self.sc[K.SC_SLOT_FREE] = nfree + new - old
            self.reg_bits, self.reg_comp, self.slot_free = bits, comp, free
        elif what == 2:     # union-find nodes
            old = len(self.uf_parent)
            new = 2 * old
            for name, fill in (("uf_parent", -1), ("uf_value", 0), ("uf_mark", 0)):
                arr = np.full(new, fill, dtype=np.int64)
                arr[:old] = getattr(self, name)
                setattr(self, name, arr)
        elif what == 3:     # event log
            self._alloc_events(2 * len(self.ev_kind), old=True)
        else:
            raise AssertionError(f"kernel asked to grow unknown buffer {what}")
        self.sc[K.SC_GROW] = 0

    def args(self):
        tr = self.trace
        return (self.pa, self.sc,
                tr.op_cost, tr.op_out_start, tr.op_nout, tr.op_arg_start, tr.op_args,
                tr.op_total_size, tr.t_op, tr.t_size, tr.t_storage, tr.t_child_start,
                tr.t_children, tr.s_size, tr.s_tensor_start, tr.s_tensors, tr.s_is_const,
                self.s_resident, tr.sched_kind, tr.sched_arg, tr.sched_record,
                self.t_defined, self.s_material, self.s_ref_int, self.s_ref_ext,
                self.s_pinned, self.s_la, self.s_compute, self.s_lastop,
                self.pool, self.pool_pos,
                self.s_slot, self.slot_free, self.reg_bits, self.reg_comp, self.tmp_bits,
                self.dfs, self.ecn, self.uf_parent, self.uf_value, self.uf_mark,
                self.fr_t, self.fr_remat, self.fr_phase, self.fr_i, self.fr_uend, self.ulist,
                self.ev_kind, self.ev_step, self.ev_record, self.ev_op, self.ev_subject,
                self.ev_size, self.ev_depth, self.ev_score,
                self.out_score, self.tmp_def, self.rs_buf, self.score_buf) + \
            tr.storage_adjacency()

    # -- user-defined heuristics ----------------------------------------------------------
    def _eq_root(self, node):
        while self.uf_parent[node] >= 0:
            node = self.uf_parent[node]
        return node

    def view(self, s: int) -> StorageView:
        tr = self.trace
        clock = int(self.sc[K.SC_CLOCK])
        la = int(self.s_la[s])
        la_v = None if la == K.LA_NEG_INF else la
        stale = math.inf if la_v is None else clock - la
        slot = int(self.s_slot[s])
        reg = (int(self.reg_comp[slot, 0]), int(self.reg_comp[slot, 1])) if slot >= 0 else (0, 0)
        eq = 0
        if FEATURE_EQCLASS in self.heur.features:
            roots = set()
            tcount = int(self.sc[K.SC_TCOUNT])
            for k in range(tr.s_tensor_start[s], tr.s_tensor_start[s + 1]):
                t = int(tr.s_tensors[k])
                if t >= tcount:
                    break
                op = tr.t_op[t]
                neigh = [tr.t_storage[p] for p in tr.op_args[tr.op_arg_start[op]:
                                                             tr.op_arg_start[op + 1]]]
                neigh += [tr.t_storage[c] for c in tr.t_children[tr.t_child_start[t]:
                                                                 tr.t_child_start[t + 1]]
                          if c < tcount]
                for ns in neigh:
                    if not self.s_material[ns] and ns != s:
                        roots.add(self._eq_root(int(self.ecn[ns])))
            eq = sum(int(self.uf_value[r]) for r in roots)
        return StorageView(storage=s, tensor=tr.t_names[tr.s_root[s]], size=int(tr.s_size[s]),
                           compute=int(self.s_compute[s]), last_access=la_v, clock=clock,
                           staleness=stale, region_compute=reg[0], region_rev_compute=reg[1],
                           eqclass_compute=eq)

    def user_choice(self):
        """simrd's ``Heuristic.choose`` over the pool with a Python score function."""
        best_cost, best, evals = math.inf, -1, 0
        for s in self.pool[:self.sc[K.SC_POOL_END]]:
            if s < 0:
                continue
            evals += 1
            cost = self.heur.score(self.view(int(s)))
            if cost <= best_cost:
                best_cost, best = cost, int(s)
            if cost == 0:
                break
        if best < 0:
            raise OptionError(f"heuristic {self.heur.name} gave no comparable score "
                              "(NaN for every storage)")
        self.sc[K.SC_EVALS] += evals
        self.sc[K.SC_VICTIM] = best
        self.out_score[0] = float(best_cost)


_ERRORS = {
    K.ERR_LOCK_EVICTED: "lock or pin of an evicted storage",
    K.ERR_ABSORB: "region absorb of a storage missing from the frontier",
    K.ERR_EVICT_LOCKED: "eviction of a locked, pinned or constant storage",
    K.ERR_ECN: "equivalence-class node missing",
    K.ERR_POOL: "unlocked storage missing from the eviction pool",
    K.ERR_REBUILD: "region rebuild of an evicted storage",
}


def _drive(st: _State, stop_at_choice: bool) -> int:
    """Run the kernel to completion, serving its requests."""
    while True:
        code = K.run(*st.args())
        if code == K.ST_GROW:
            st.grow()
        elif code == K.ST_NEED_CHOICE and not stop_at_choice:
            st.user_choice()
        else:
            return code


def replay(trace, budget: int, heuristic="dtr", *, overhead_limit: float | None = None,
           record: bool = False, keep_resident: frozenset[str] = frozenset(),
           ratio: float | None = None) -> ReplayResult:
    """Replay ``trace`` under ``budget`` bytes with simrd's ``RuntimeV2EagerOptimized``.

    Parameters
    ----------
    trace : Trace
    budget : int
        Bytes.
    heuristic : str, Heuristic or callable, default "dtr"
        A name of :data:`memopt.dtr.HEURISTICS` (``'dtr'``, ``'dtr-eqclass'``,
        ``'dtr-local'``, ``'msps'``, ``'lru'``, ``'largest'`` or simrd's class names), a
        :class:`memopt.dtr.heuristics.Heuristic`, or a callable ``score(StorageView) -> float``
        (lower is evicted first).
    overhead_limit : float, optional
        X stops the run with ``'thrash'`` once the rematerialization compute exceeds
        ``baseline_compute * (X - 1)`` (simrd's ``remat_limit``); ``None``: no limit.
    record : bool, default False
        Keep a :class:`ReplayLog` of evictions, recomputations and the failure point.
    keep_resident : frozenset of str
        Trace tensor names whose storages are pinned once computed (never evicted), a
        counterfactual that simrd does not have.
    ratio : float, optional
        Only reported in the result.

    Returns
    -------
    ReplayResult
        ``status`` (``'pass'``, ``'OOM'``, ``'thrash'``), ``clock``, ``remat_compute``,
        ``max_memory``... field for field what simrd reports.

    Raises
    ------
    OptionError
        A negative or non-finite budget, an overhead limit below 1.
    MemoptError
        An unknown heuristic name.
    FormatError
        The trace reaches a state where simrd fails (named in the message).

    Examples
    --------
    >>> from memopt.dtr.trace import parse_lines
    >>> tr = parse_lines(['{"INSTRUCTION": "CONSTANT", "NAME": "x"}',
    ...                   '{"INSTRUCTION": "MEMORY", "NAME": "x", "MEMORY": 4}',
    ...                   '{"INSTRUCTION": "CALL", "NAME": "f", "ARGS": ["x"], "RESULT": ["y"], "TIME": 3}',
    ...                   '{"INSTRUCTION": "MEMORY", "NAME": "y", "MEMORY": 8}',
    ...                   '{"INSTRUCTION": "ALIAS", "NAME": "y", "ALIAS": -1}'])
    >>> replay(tr, 12).status, replay(tr, 11).status
    ('pass', 'OOM')
    """
    trace = _as_trace(trace)
    heur = resolve_heuristic(heuristic)
    base = baseline(trace)
    budget = _check_budget(budget)
    if overhead_limit is not None:
        overhead_limit = _number(overhead_limit, "overhead limit")
        if not overhead_limit >= 1:
            raise OptionError(f"overhead limit {_show(overhead_limit)} is below 1")
    if overhead_limit is None or overhead_limit == math.inf:
        limit = _INT64_MAX
    else:
        remat_limit = base.compute * (overhead_limit - 1)   # same float as simrd's runner
        if not remat_limit >= 0:
            raise OptionError(f"overhead limit {_show(overhead_limit)} is below 1")
        limit = _INT64_MAX if remat_limit >= _INT64_MAX else math.floor(remat_limit)
    resident = np.zeros(trace.n_storages, dtype=np.bool_)
    if keep_resident:
        for s in trace.storages_of(keep_resident):
            resident[s] = True
    # The region / equivalence-class bookkeeping runs from the start even when no
    # eviction choice is ever needed: simrd's bookkeeping can fail an assertion on its
    # own (stale regions), and that failure is part of the outcome (FormatError here).
    st = _State(trace, budget, limit, heur, record, resident)
    code = _drive(st, stop_at_choice=False)
    sc = st.sc
    if code == K.ST_ERROR:
        err = int(sc[K.SC_ERR])
        s = int(sc[K.SC_ERR_ARG])
        if err == K.ERR_OVERFLOW:
            raise FormatError(f"{trace.name}: the replay clock (compute plus rematerialization) "
                              f"would exceed int64 at schedule step {int(sc[K.SC_SCHED])}: the "
                              "log's TIME values are too large for exact arithmetic")
        raise FormatError(f"{trace.name}: replay reached a state where simrd fails an "
                          f"assertion ({_ERRORS.get(err, err)}, storage of "
                          f"{trace.t_names[trace.s_root[s]]!r}, schedule step "
                          f"{int(sc[K.SC_SCHED])})")
    status = {K.ST_PASS: "pass", K.ST_OOM: "OOM", K.ST_THRASH: "thrash"}[code]
    log = _make_log(st, code) if record else None
    return ReplayResult(
        status=status, budget=budget, baseline_peak=base.peak,
        baseline_compute=base.compute, clock=int(sc[K.SC_CLOCK]),
        model_compute=int(sc[K.SC_MODEL]), remat_compute=int(sc[K.SC_REMAT]),
        max_memory=int(sc[K.SC_MAXMEM]), heuristic_evals=int(sc[K.SC_EVALS]),
        heuristic=heur.name, overhead_limit=overhead_limit, ratio=ratio, log=log)


def replay_ratio(trace, ratio: float, heuristic="dtr", **kw) -> ReplayResult:
    """:func:`replay` with ``budget = int(ratio * baseline(trace).peak)`` (simrd's rule).

    Parameters
    ----------
    trace : Trace
    ratio : float
        Fraction of the baseline peak.
    heuristic : str, Heuristic or callable, default "dtr"
        As :func:`replay`.
    **kw
        The other keywords of :func:`replay`.

    Returns
    -------
    ReplayResult

    Raises
    ------
    OptionError
        As :func:`replay`.

    Examples
    --------
    >>> from memopt.dtr.trace import parse_lines
    >>> tr = parse_lines(['{"INSTRUCTION": "CONSTANT", "NAME": "x"}',
    ...                   '{"INSTRUCTION": "MEMORY", "NAME": "x", "MEMORY": 4}'])
    >>> replay_ratio(tr, 1.0).budget
    4
    """
    trace = _as_trace(trace)
    ratio = _number(ratio, "ratio")
    if not (math.isfinite(ratio) and ratio >= 0):
        raise OptionError(f"ratio must be a finite number >= 0 (a fraction of the baseline peak), "
                          f"got {_show(ratio)}")
    peak = baseline(trace).peak
    product = ratio * peak
    if not product < MAX_BUDGET:
        raise OptionError(f"ratio {_show(ratio)} gives a budget of {_show(product)} bytes "
                          f"(baseline peak {peak}), beyond memopt's exact limit of 2**62")
    budget = int(product)
    return replay(trace, budget, heuristic, ratio=ratio, **kw)


def _make_log(st: _State, code: int) -> ReplayLog:
    tr = st.trace
    n = int(st.sc[K.SC_NEVENTS])
    events = []
    for i in range(n):
        step = int(st.ev_step[i])
        rec = int(st.ev_record[i])
        op = tr.op_names[int(st.ev_op[i])]
        if st.ev_kind[i] == K.EV_EVICT:
            s = int(st.ev_subject[i])
            events.append(Eviction(seq=i, step=step, instruction=rec, op=op,
                                   tensor=tr.t_names[tr.s_root[s]], size=int(st.ev_size[i]),
                                   score=float(st.ev_score[i]), depth=int(st.ev_depth[i])))
        else:
            events.append(Remat(seq=i, step=step, instruction=rec, op=op,
                                tensor=tr.t_names[int(st.ev_subject[i])],
                                depth=int(st.ev_depth[i]), size=int(st.ev_size[i])))
    oom = None
    if code == K.ST_OOM:
        depth = int(st.sc[K.SC_DEPTH])
        t = int(st.fr_t[depth - 1])
        op = int(tr.t_op[t])
        step = int(st.sc[K.SC_SCHED])
        mem = int(st.sc[K.SC_MEM])
        budget = int(st.pa[K.PA_BUDGET])
        req = int(tr.op_total_size[op])
        locked = tuple(tr.t_names[tr.s_root[s]] for s in np.flatnonzero(
            (st.s_ref_int > 0) & ~st.s_pinned))
        pinned = np.flatnonzero(st.s_pinned & st.s_material)
        oom = OOMInfo(step=step, instruction=int(tr.sched_record[step]), op=tr.op_names[op],
                      requested=req, budget=budget, memory=mem, available=budget - mem,
                      short=mem + req - budget,
                      cascade=tuple(tr.t_names[int(x)] for x in st.fr_t[:depth]),
                      locked=locked, pinned=int(len(pinned)),
                      pinned_bytes=int(tr.s_size[pinned].sum()))
    return ReplayLog(events=tuple(events), oom=oom)
