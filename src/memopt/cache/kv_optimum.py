"""The offline optimum of KV-cache eviction: the most attention any eviction schedule retains.

**Model** (:mod:`memopt.cache.kv_policies`): per head, at most ``B`` past positions are cached
at each decode step ``t >= prefill``; evicted positions never come back; the value of a
schedule is the retained attention ``sum_{t >= prefill} sum_{j cached at t} a_t[j]``.

**An interval-selection problem.** Position ``j`` can be a cached past position from step
``arr(j) = max(j + 1, prefill)`` on (positions of the prompt all arrive at the end of the
prompt). Since it never returns once evicted and attention is non-negative, an optimal
schedule keeps it over an interval ``[arr(j), e_j]`` and its whole choice is the last step
``e_j`` in ``{arr(j) - 1 (never kept), ..., T - 1}``, worth
``W_j(e) = sum_{t = arr(j)}^{e} a_t[j]``. The schedule is feasible iff at every decode step
``t`` at most ``B`` intervals contain ``t``. (Keeping ``j`` in part of an interval and out of
it again is impossible: it could not come back.)

**Min-cost flow** (OR-Tools ``ortools.graph.python.min_cost_flow``): ``B`` units (cache
slots) flow along time. Nodes ``F_t`` (``t = prefill .. T``: a slot is free at the start of
step ``t``) with chain arcs ``F_t -> F_{t+1}`` (capacity ``B``, cost 0: slots left free
during step ``t``); per position ``j`` a node ``E_j`` with an arc ``F_{arr(j)} -> E_j`` of
capacity 1 (position ``j`` is taken into a slot at most once) and arcs
``E_j -> F_{e + 1}`` (capacity 1, cost ``-W_j(e)``) for every ``e >= arr(j)``: the slot
holds ``j`` through step ``e``, then is free again. Supply ``B`` at ``F_prefill``, demand
``B`` at ``F_T``. An integral flow is a schedule and back (the units crossing step ``t``
are the ``B`` slots: free, or holding one interval that contains ``t``), with cost
``-(retained attention)``. The constraint matrix is a network matrix, hence totally
unimodular: the min-cost flow (computed integrally by OR-Tools) is optimal among all
schedules, not only among fractional ones.

**Exactness.** The trace's attention is stored as integers (units of ``1 / scale``,
:mod:`memopt.cache.kv_trace`), so every cost is an exact int64 and the optimum is the exact
maximum over schedules of the trace *as stored*; it is then checked by replaying the schedule
with :func:`memopt.cache.kv_policies.schedule_retained` (``InternalError`` on any
disagreement). (Relative to the unrounded float attention, any schedule's value moves by at
most ``group / 2`` units per counted cell, the same for the optimum and the policies.) Costs
stay below ``T * group * scale < 2**47`` for ``T < 2**16``, far from OR-Tools' int64 cost
range. Size: ``O(T^2)`` arcs per head — the size of the head's attention itself.

The commit-lag axis of fixed-lag commit (``rmm`` at ``lag = 0, 1, 4, ...``) ends here: with
the whole future known, the best schedule is this one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from memopt.errors import InternalError, OptionError
from memopt.cache.kv_policies import check_prefill, total_mass, arrivals, check_budget, schedule_retained
from memopt.cache.kv_trace import AttentionTrace

__all__ = ["KVOptimum", "kv_optimum", "optimum_head"]


@dataclass(frozen=True)
class KVOptimum:
    """The offline optimum: ``retained`` (exact, units of ``1 / scale``, summed over heads)
    out of ``total``; ``status`` is ``"optimal"``. ``per_head`` and ``last_step`` (the optimal
    schedule, as in :class:`memopt.cache.kv_policies.KVResult`) are not in :meth:`to_dict`."""

    budget: int
    prefill: int
    steps: int
    heads: int
    retained: int
    total: int
    status: str = "optimal"
    per_head: np.ndarray = None
    last_step: np.ndarray = None

    @property
    def fraction(self) -> float:
        return self.retained / self.total if self.total else 1.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("per_head")
        d.pop("last_step")
        d["policy"] = "optimum"
        d["fraction"] = self.fraction
        return d


def optimum_head(A: np.ndarray, budget: int, prefill: int = 0) -> tuple[int, np.ndarray]:
    """Optimal retained attention and schedule (``last_step`` per position) of one head with
    integer attention ``A`` (``T x T``, lower triangular)."""
    T = A.shape[0]
    P = prefill
    arr = arrivals(T, P)
    last = arr - 1
    last[T - 1:] = T - 1
    if T == 0 or P >= T or budget == 0:
        return 0, np.minimum(last, T - 1)
    col = np.cumsum(A.astype(np.int64), axis=0)            # col[t, j] = sum_{s <= t} A[s, j]
    js = np.flatnonzero(arr <= T - 1)                      # positions that can be kept
    e_grid = np.arange(T)[None, :]
    ok = e_grid >= arr[js][:, None]                        # (len(js), T): e >= arr(j)
    jj, ee = np.nonzero(ok)
    jpos = js[jj]
    before = np.where(arr[jpos] >= 1, col[arr[jpos] - 1, jpos], 0)
    W = col[ee, jpos] - before
    n_chain = T - P + 1                                    # F_P .. F_T
    e_node = n_chain + np.arange(js.size)                  # E_j
    tails = np.concatenate([np.arange(n_chain - 1), arr[js] - P, e_node[jj]])
    heads = np.concatenate([np.arange(1, n_chain), e_node, ee + 1 - P])
    caps = np.concatenate([np.full(n_chain - 1, budget), np.ones(js.size), np.ones(jj.size)])
    costs = np.concatenate([np.zeros(n_chain - 1 + js.size, dtype=np.int64), -W])
    from ortools.graph.python import min_cost_flow

    mcf = min_cost_flow.SimpleMinCostFlow()
    arcs = mcf.add_arcs_with_capacity_and_unit_cost(tails.astype(np.int32), heads.astype(np.int32),
                                                    caps.astype(np.int64), costs.astype(np.int64))
    supply = np.zeros(n_chain + js.size, dtype=np.int64)
    supply[0], supply[n_chain - 1] = budget, -budget
    mcf.set_nodes_supplies(np.arange(supply.size, dtype=np.int32), supply)
    status = mcf.solve()
    if status != mcf.OPTIMAL:
        if status in (mcf.BAD_CAPACITY_RANGE, mcf.BAD_COST_RANGE):
            raise OptionError(f"attention sums too large for exact min-cost flow (status {status}); "
                              "use a smaller scale")
        raise InternalError("kv-min-cost-flow-status", f"min-cost flow ended with status {status}")
    flows = mcf.flows(np.asarray(arcs)[n_chain - 1 + js.size:])
    used = np.flatnonzero(flows > 0)
    if np.unique(jj[used]).size != used.size:
        raise InternalError("kv-flow-integral", "a position is held by two slots in the optimal flow")
    last[jpos[used]] = ee[used]
    return -int(mcf.optimal_cost()), last


def kv_optimum(trace: AttentionTrace, budget, *, prefill: int = 0) -> KVOptimum:
    """The most attention any schedule with at most ``budget`` past positions per head (from
    step ``prefill`` on) retains, exactly, with an optimal schedule (module doc).

    >>> from memopt.cache.kv_trace import make_attention_trace
    >>> a = [[[[8, 0, 0, 0], [6, 2, 0, 0], [5, 1, 2, 0], [4, 3, 0, 1]]]]
    >>> opt = kv_optimum(make_attention_trace(a, [True] * 4, scale=8), 1)
    >>> opt.retained, opt.total, opt.last_step.tolist()
    (15, 19, [[3, 1, 2, 3]])
    """
    if not isinstance(trace, AttentionTrace):
        raise OptionError(f"kv_optimum needs an AttentionTrace, got {type(trace).__name__}")
    B = check_budget(budget, trace)
    P = check_prefill(prefill, trace)
    A = trace.heads()
    K, T = A.shape[0], trace.steps
    per = np.zeros(K, dtype=np.int64)
    last = np.zeros((K, T), dtype=np.int64)
    for k in range(K):
        per[k], last[k] = optimum_head(A[k], B, P)
    check = schedule_retained(trace, last, B, P)
    if not np.array_equal(check, per):
        raise InternalError("kv-optimum-value", "the optimal flow's cost disagrees with its schedule's "
                                                "retained attention")
    return KVOptimum(B, P, T, K, int(per.sum()), int(total_mass(trace, P).sum()), "optimal", per, last)
