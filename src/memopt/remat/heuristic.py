"""A fast recomputation heuristic for graphs too large for the exact models (thousands of ops).

Start: the scheduling core's optimal no-recomputation order (``memopt.schedule(graph)``, or
the runs of an ``incumbent`` plan) as a *run sequence*, and the input order (ops in id
order, or a topological order) as a second start. A run sequence is turned into a plan by
:func:`~memopt.remat.model_common.plan_from_runs` (every production freed right after its
last read, so a sequence is always a valid plan) and evaluated exactly in O(steps + edges).

Moves: at the run ``i`` where memory is highest, every tensor ``x`` that is live there only
to be read later (produced before, next read at ``j > i``, not touched by run ``i``; its
producer ``u`` below its cap; positive size), or that is a graph output held to the end
(``j`` = the end), is a candidate: *insert a re-run of ``u`` right before run ``j``*, which frees ``x`` after its last read before ``i`` (its earlier reads are
served by the first production, the later ones by the re-run) at the price of ``c(u)``. The
re-run needs ``u``'s inputs; an input no longer live at ``j`` is either held until ``j``
(which can cost more memory than freeing ``x`` saves) or re-made by re-running its own
producer first, recursively up to :data:`DEPTH` levels (a *chain*). Two rankings
(:data:`STRATEGIES`):

* ``gain``: every chain depth is a candidate, ranked by its estimated drop of the memory
  above the limit summed over the runs (``-s(x)`` from the last read of ``x`` before ``i``
  to ``j``, ``+s(y)`` over the extension of every held input ``y``), per unit of extra cost;
  the best :data:`CANDIDATES` are evaluated exactly and the one with the largest exact
  score drop per unit of extra cost is taken (free re-runs first);
* ``byte``: the producer alone, cheapest per byte of ``x`` first; the best exact score of
  the first :data:`CANDIDATES` is taken.

The score: for ``min_cost`` (limit ``M``) the total overflow ``sum_runs max(0, memory - M)``,
then the peak; stop as soon as the plan fits, then drop every re-run that is not needed to
fit (costliest first). For ``min_peak`` (budget ``B``): the peak, then the number of runs at
the peak; only moves within the budget. Each (start, ranking) pair runs until no candidate
improves its score (or its share of the time limit), and the best answer is kept.

Holding the inputs is why the single-re-run move alone fails on the random layered graphs of
Checkmate (ops with up to 16 inputs): re-making the inputs too is what fits 0.9 of the
no-recomputation optimum there. The move is the usual peak-driven rematerialization step
(free a value held across the memory peak, re-make it just before its next use), written
for memopt's plan model (``docs/remat.md``); it is no published algorithm, and its plans are
compared against the exact models (Checkmate's MIP, Jain et al., MLSys 2020, made exact for
caps in :mod:`memopt.remat.mip`) in ``benchmarks/remat_table.py``.

One more start is the answer of the held-tensor moves (:mod:`memopt.remat.held_tensors`,
a quarter of the time): the tensors held across every run at the peak are re-made before
their next read by a closure of producers, one at a time or all those one run reads next
together (a concatenation's inputs), which the move above misses when re-making one value
means holding an input as large as it (real networks: stacks, skips, global residuals).

Then, for ``min_cost`` once a plan fits, a large-neighbourhood search
(:func:`improve_by_lns`, the ruin-and-recreate scheme of Schrimpf et al., "Record breaking
optimization results using the ruin and recreate principle", J. Comput. Phys. 159, 2000):
remove one re-run (each in turn, costliest first) or a few re-runs close together, try to fit
again by moving single runs near the highest one (:func:`reorder_runs`; the move the
peak-driven greedy lacks: once re-runs are in, the scheduler's order is no longer the best
one), else by the greedy above with the removed ops tabu and a random one of its best moves;
keep a cheaper result, and sometimes a slightly dearer one (a fixed-temperature annealing
step), until the deadline or :data:`LNS_PATIENCE` ruins without a new best.

The search runs from several starts (:func:`_multi_start`): on the random layered graphs
the order the re-runs start from matters more than the search (from sixteen least-peak
orders of ``random_layered_n250`` the greedy ends at extra costs from 5703 to 8943, the
search from four of them at 3841 to 7267). So once a plan fits, the greedy also runs from
the least-peak orders of the relaxed graphs of the ops it re-runs
(:func:`_relaxed_orders`; on ``random_layered_n500`` these lead to 2962 where the
scheduler's orders stop near 6900) and from other least-peak orders of the scheduler (other
seeds), each also in its least-overflow version (:func:`_greedy_least_overflow`,
:mod:`memopt.remat.order_search`: single ops moved to lower the memory above the limit summed
over the runs, which is what the greedy pays for; measured in ``benchmarks/README.md``), and the search runs on the fitting plans in rounds of successive halving (Jamieson and Talwalkar, "Non-stochastic best arm
identification and hyperparameter optimization", AISTATS 2016): equal slices of time, the
cheaper half goes on. Sequences are evaluated without building their plans
(:func:`_profile`, O(runs + edges)); every plan returned is built and evaluated exactly.

It never returns an invalid plan: the result is re-evaluated (and :func:`memopt.remat`
checks it independently). It proves nothing beyond the footprint bound
(:func:`~memopt.remat.model_common.footprint_bound`).

Example
-------
>>> from memopt.core import Op, Tensor, TensorGraph
>>> g = TensorGraph.build(
...     [Tensor("a", 10), Tensor("b", 20), Tensor("c", 20), Tensor("d", 1, output=True)],
...     [Op("fa", (), ("a",), cost=1), Op("fb", ("a",), ("b",), cost=5),
...      Op("fc", ("b",), ("c",), cost=5), Op("fd", ("a", "c"), ("d",), cost=5)])
>>> r = heuristic_method(g, question="min_cost", memory_limit=40, cap=1, time_limit=5)
>>> (r.peak, r.extra_cost)
(40, 1)
"""

from __future__ import annotations

import time
from bisect import bisect_left, bisect_right
from fractions import Fraction

import numpy as np

from memopt.errors import InternalError, OptionError, ScheduleError
from memopt.remat.model_common import (RematProblem, evaluate, finish_result, plan_from_runs, start_result)
from memopt.remat.warm_start import Seed

__all__ = ["heuristic_method", "improve_runs", "improve_by_lns"]

#: candidates evaluated exactly per move (the best ranked)
CANDIDATES = 8
#: levels of inputs re-made with a re-run (rather than held until it)
DEPTH = 3
#: graphs with at least this many ops scan for moves in batches of :data:`BATCH` (every graph
#: the single-move greedy was tuned on, the Checkmate and random layered graphs, has at most
#: 1000 ops; on the DenseNet-121 training graph, 2435 ops, one scan takes as long as ~30 exact
#: evaluations and a plan within 0.9 of P0 needs ~100 moves: single moves fit none of 0.9 / 0.8
#: in 60 s, batches fit both in ~5 CPU seconds)
BATCH_MIN_OPS = 1024
#: candidate moves tried (in ranked order, each kept if it lowers the score) per scan
BATCH = 64
#: run sequences this long are evaluated by :func:`_profile_vector` (below, the one pass over
#: the runs is faster: measured on the Checkmate, random layered and corpus graphs)
VECTOR_MIN_RUNS = 400
#: the move rankings tried from every start (see :func:`improve_runs`)
STRATEGIES = ("gain", "byte")
#: the randomized greedy of :func:`improve_by_lns` picks one of this many best moves
RANDOM_TOP = 3
#: :func:`reorder_runs` moves runs this many positions around the highest one (4 before:
#: from the greedy's plan of the scheduler's order the search reaches 5451 instead of 5510 on
#: ``random_layered_n250`` and 918 instead of 929 on ``n100``; the re-runs of its plans are
#: already optimal for their order of first runs (:mod:`memopt.remat.stage_model`), so moving
#: runs is the move that pays)
REORDER_WINDOW = 8
#: ruins in a row without a new best plan after which :func:`improve_by_lns` stops (at most) ...
LNS_PATIENCE = 100
#: ... and per re-run of the current plan (plus two)
LNS_PATIENCE_PER_RERUN = 5
#: :func:`_multi_start` stops asking for new orders after the scheduler repeats one this often ...
MAX_REPEATS = 3
#: ... or once it has this many orders ...
MAX_ORDERS = 32
# ... or used its share of the search time (``heuristic.orders`` of memopt.time_shares,
# where every share of the heuristic's time is)

#: :func:`improve_by_lns` may move to a plan this much (relative) dearer than its best ...
LNS_SLACK = Fraction(1, 10)
#: ... with this probability
LNS_ACCEPT_WORSE = 0.2


def _gather(ptr, idx, runs):
    """``(positions, items)``: the entries ``idx[ptr[v]:ptr[v + 1]]`` of every run ``v`` of
    ``runs``, flattened, with the position of the run each comes from."""
    lens = ptr[runs + 1] - ptr[runs]
    pos = np.repeat(np.arange(len(runs), dtype=np.int64), lens)
    total = int(lens.sum())
    offs = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens)
    return pos, idx[np.repeat(ptr[runs], lens) + offs]


def _profile(p: RematProblem, runs):
    """``(None, peak, extra cost, memory of each run)`` of the plan
    :func:`~memopt.remat.model_common.plan_from_runs` makes of a run sequence, computed
    without building it (the search evaluates thousands of sequences; building and
    evaluating each plan was 80 % of its time on ``random_layered_n500``): each production
    of a tensor is live before the runs after it up to its last read before the next
    production, or to the end for the last production of a graph output. The same numbers
    as :func:`_exact` (tested); caps are not checked here, :func:`_exact` checks them. Raises
    :class:`ScheduleError` if a run reads a tensor not produced before it. Sequences of
    :data:`VECTOR_MIN_RUNS` runs or more go to :func:`_profile_vector`, the others to
    :func:`_profile_loop` (the same answers and errors: tested)."""
    return (_profile_vector if len(runs) >= VECTOR_MIN_RUNS else _profile_loop)(p, runs)


def _profile_loop(p: RematProblem, runs):
    """:func:`_profile` by one pass over the runs (the faster one on small graphs)."""
    n_runs = len(runs)
    size, ins, outs, costs = p.size, p.ins, p.outs, p.costs
    diff = [0] * (n_runs + 1)
    made: dict = {}
    last: dict = {}
    for t in p.inputs:
        made[t] = last[t] = -1
    seen = bytearray(p.n)
    extra = 0
    for i, v in enumerate(runs):
        for t in ins[v]:
            if t not in made:
                raise ScheduleError(f"run {i}: op {p.graph.op_names[v]!r} reads {p.graph.tensor_names[t]!r}, "
                                    "which has not been produced before")
            last[t] = i
        for t in outs[v]:
            m = made.get(t)
            if m is not None and last[t] > m:
                diff[m + 1] += size[t]  # live before the runs m + 1 .. last read
                diff[last[t] + 1] -= size[t]
            made[t] = last[t] = i
        if seen[v]:
            extra += costs[v]
        seen[v] = 1
    outputs = set(p.outputs)
    for t, m in made.items():
        if t in outputs:
            diff[m + 1] += size[t]
        elif last[t] > m:
            diff[m + 1] += size[t]
            diff[last[t] + 1] -= size[t]
    level, prof, off = 0, [], p.resident_bytes
    ws = p.ws
    for i, v in enumerate(runs):
        level += diff[i]
        prof.append(off + level + sum(size[t] for t in outs[v]) + ws[v])
    return None, max([p.start] + prof), extra, prof


def _profile_vector(p: RematProblem, runs):
    """:func:`_profile` vectorized over the reads and productions of the runs (sorted by
    tensor, then position; each production starts a segment that ends at its last read), in
    exact int64 byte counts: 3-5x faster from a few hundred runs on (DenseNet-121's training
    graph: 7 ms instead of 39 ms), slower below."""
    a = p.arrays
    R = np.asarray(runs, dtype=np.int64).reshape(-1)
    nr = len(R)
    rpos, rten = _gather(a["in_ptr"], a["in_idx"], R)
    mpos, mten = _gather(a["out_ptr"], a["out_idx"], R)
    ipos = np.full(len(a["inputs"]), -1, dtype=np.int64)
    pos = np.concatenate([ipos, mpos, rpos])
    ten = np.concatenate([a["inputs"], mten, rten])
    make = np.zeros(len(pos), dtype=bool)
    make[:len(ipos) + len(mpos)] = True
    # within a tensor by position (an op never reads its own output, so no ties)
    order = np.argsort(ten * (nr + 2) + (pos + 1), kind="stable")
    pos, ten, make = pos[order], ten[order], make[order]
    seg = np.cumsum(make) - 1  # the production serving each event
    starts = np.flatnonzero(make)
    bad = ~make & ((seg < 0) | (ten != ten[starts[np.maximum(seg, 0)]] if len(starts) else True))
    if bad.any():
        i = int(pos[bad].min())  # the first such run, and its first such input
        t = next(t for t in p.ins[int(R[i])] if t in set(ten[bad & (pos == i)].tolist()))
        raise ScheduleError(f"run {i}: op {p.graph.op_names[int(R[i])]!r} reads "
                            f"{p.graph.tensor_names[t]!r}, which has not been produced before")
    diff = np.zeros(nr + 2, dtype=np.int64)
    if len(starts):
        last_ev = np.append(starts[1:], len(pos)) - 1
        m = pos[starts]
        t = ten[starts]
        upto = np.where(make[last_ev], m, pos[last_ev])  # the last read of each production
        last_of_tensor = np.append(t[1:] != t[:-1], True)
        s = a["size"][t]
        to_end = last_of_tensor & a["output"][t]
        held = to_end | (upto > m)
        np.add.at(diff, m[held] + 1, s[held])
        gone = held & ~to_end
        np.add.at(diff, upto[gone] + 1, -s[gone])
    prof = p.resident_bytes + np.cumsum(diff[:nr]) + a["out_bytes"][R] + a["ws"][R]
    first = np.zeros(nr, dtype=bool)
    first[np.unique(R, return_index=True)[1]] = True
    costs = p.costs
    extra = sum((costs[v] for v in R[~first].tolist()), 0)
    prof = prof.tolist()
    return None, max([p.start] + prof), extra, prof


def _exact(p: RematProblem, runs):
    """``(runs, plan, peak, cost)``: the plan of a run sequence, evaluated by the evaluator
    (every rule, caps included), which must agree with :func:`_profile`."""
    from memopt.core.remat import evaluate_steps

    runs = [int(v) for v in runs]
    plan = plan_from_runs(p, runs)
    ev = evaluate_steps(p.graph, plan.kind, plan.index, list(p.caps))
    fast = _profile(p, runs)
    if (fast[1], Fraction(fast[2])) != (ev.peak, Fraction(ev.extra_cost)):
        raise InternalError("remat-profile", f"direct profile (peak {fast[1]}, cost {fast[2]}) differs from the "
                                             f"evaluator's (peak {ev.peak}, cost {ev.extra_cost})")
    return runs, plan, ev.peak, ev.extra_cost


def _score(question, memory_limit, peak, prof):
    if question == "min_cost":
        return (sum(m - memory_limit for m in prof if m > memory_limit), peak)
    return (peak, sum(1 for m in prof if m == peak))


def _reads_and_productions(p: RematProblem, runs):
    """Per tensor: the run positions that read it and the ones that produce it (ascending)."""
    reads = [[] for _ in range(p.num_tensors)]
    made = [[] for _ in range(p.num_tensors)]
    for i, v in enumerate(runs):
        for t in p.ins[v]:
            reads[t].append(i)
        for t in p.outs[v]:
            made[t].append(i)
    return reads, made


def _held_until(reads, made, t: int, j: int) -> int:
    """The run position after which the production of ``t`` current at position ``j`` is
    freed: its last read, or the run that made it if nobody reads it (-1: the start)."""
    k = bisect_left(made[t], j)
    since = made[t][k - 1] if k else -1
    lo = bisect_right(reads[t], since)
    hi = bisect_left(reads[t], made[t][k]) if k < len(made[t]) else len(reads[t])
    return reads[t][hi - 1] if hi > lo else since


def _chain(p: RematProblem, reads, made, u: int, j: int, counts, depth: int, forbid=frozenset()):
    """``(ops, held)``: the ops to re-run, in order, right before position ``j`` so that ``u``
    runs there, and the inputs whose current production must then be held until ``j``. An
    input no longer live at ``j`` is re-made too (its producer first, recursively, ``depth``
    levels) if its producer is below its cap (and not in ``forbid``), else held. ``None`` if
    ``u`` is at its cap or forbidden."""
    extra: dict = {}
    made_here: set = set()
    held: dict = {}
    outputs = set(p.outputs)

    def add(v, d):
        if counts[v] + extra.get(v, 0) >= 1 + p.caps[v] or v in forbid:
            return None
        seq = []
        for y in p.ins[v]:
            if y in made_here or p.size[y] == 0:
                continue
            last = _held_until(reads, made, y, j)
            if last >= j or (y in outputs and bisect_left(made[y], j) == len(made[y])):
                continue  # live at j anyway (read later, or the last production of an output)
            sub = add(p.producer[y], d - 1) if d > 0 and p.producer[y] >= 0 else None
            if sub is None:
                held[y] = last
            else:
                seq.extend(sub)
        extra[v] = extra.get(v, 0) + 1
        made_here.update(p.outs[v])
        return seq + [v]

    ops = add(u, depth)
    # add refers to itself through its closure cell: cleared, the call leaves no reference
    # cycle behind (else about 10,000 a second for the garbage collector in the search)
    add = None
    return None if ops is None else (ops, {y: a for y, a in held.items() if y not in made_here})


def _candidates(p: RematProblem, runs, prof, idx, counts, level: int, strategy: str, forbid=frozenset()):
    """``[(key, x, chain, j)]``, best first: insert the re-runs ``chain`` (ending with the
    producer of ``x``) before run ``j`` to free ``x`` across run ``idx``.

    ``strategy="gain"``: chains up to :data:`DEPTH` levels, ranked by the estimated drop of
    the memory above ``level`` summed over the runs (freeing ``x`` after its last read before
    ``idx`` lowers the runs up to ``j``, holding the chain's inputs raises them) per unit of
    extra cost; ``"byte"``: the producer of ``x`` alone, cheapest per byte of ``x`` first."""
    prod = {}
    for i in range(idx):
        for x in p.outs[runs[i]]:
            prod[x] = i
    busy = set(p.ins[runs[idx]]) | set(p.outs[runs[idx]])
    first_read: dict = {}
    again: set = set()
    for i in range(idx + 1, len(runs)):
        v = runs[i]
        for x in p.ins[v]:
            if x in prod and x not in again and x not in first_read:
                first_read[x] = i
        again.update(p.outs[v])
    for x in p.outputs:
        if x in prod and x not in first_read and x not in again:
            # a graph output held from before the peak to the end: re-make it at the end
            first_read[x] = len(runs)
    reads, made = _reads_and_productions(p, runs)
    over = np.asarray(prof, dtype=np.int64) - level
    out = []
    for x, j in first_read.items():
        if x in busy or p.size[x] == 0:
            continue
        u = p.producer[x]
        if counts[u] >= 1 + p.caps[u] or u in forbid:
            continue
        # freed after its last read before the peak (or right after it was made)
        r = bisect_left(reads[x], idx)
        a = max(prod[x], reads[x][r - 1] if r else -1)
        if strategy == "byte":
            out.append(((Fraction(p.costs[u]) / p.size[x], -p.size[x]), x, (u,), j))
            continue
        seen = set()
        for d in range(DEPTH + 1):
            got = _chain(p, reads, made, u, j, counts, d, forbid)
            if got is None:
                break
            chain, held = got
            key = tuple(chain)
            if key in seen:
                continue
            seen.add(key)
            lo = min([a] + list(held.values())) + 1
            delta = np.zeros(j - lo, dtype=np.int64)
            delta[a + 1 - lo:] -= p.size[x]
            for y, b in held.items():
                delta[b + 1 - lo:] += p.size[y]
            window = over[lo:j]
            gain = int(np.maximum(window, 0).sum() - np.maximum(window + delta, 0).sum())
            if gain <= 0:
                continue
            cost = Fraction(sum((p.costs[v] for v in chain), 0))
            out.append(((-(Fraction(gain) / cost if cost else Fraction(2**80) * gain), 0), x, key, j))
    out.sort(key=lambda c: c[0])
    return out


def improve_runs(p: RematProblem, runs, question: str, *, memory_limit=None, cost_budget=None,
                 deadline: float = float("inf"), strategy: str = "gain", forbid=frozenset(), rng=None,
                 cost_cap=None, batch: int = 1):
    """Improve a run sequence by inserting re-runs (see the module docstring); returns the
    best ``(runs, plan, peak, extra_cost)`` found. ``strategy``: ``"gain"`` (chains, the best
    exact score drop per unit of extra cost) or ``"byte"`` (one re-run, the best score).
    ``forbid``: ops that no inserted re-run may be of (the large-neighbourhood search's tabu);
    ``rng`` (a numpy generator): take one of the :data:`RANDOM_TOP` best moves at random instead
    of the best (randomized greedy, for the search's recreate step); ``cost_cap``: give up
    (returning the sequence reached) once the extra cost reaches it without fitting;
    ``batch`` > 1 (``min_cost`` only): each scan of the candidates applies, in their ranked
    order, every one of its first ``batch`` moves that lowers the score (:func:`_apply_batch`)
    instead of the single best one -- the feasibility-first step on large graphs, where a scan
    costs as much as dozens of exact evaluations and a plan needs hundreds of moves."""
    runs = [int(v) for v in runs]
    plan, peak, cost, prof = _profile(p, runs)
    score = _score(question, memory_limit, peak, prof)
    counts = [0] * p.n
    for v in runs:
        counts[v] += 1
    while time.perf_counter() < deadline:
        if question == "min_cost" and peak <= memory_limit:
            break
        if cost_cap is not None and Fraction(cost) >= Fraction(cost_cap):
            break
        idx = max(range(len(runs)), key=lambda i: prof[i]) if runs else None
        if idx is None:
            break
        level = memory_limit if question == "min_cost" else peak - 1
        if batch > 1 and question == "min_cost":
            cands = _candidates(p, runs, prof, idx, counts, level, strategy, forbid)[:batch]
            got = _apply_batch(p, runs, cands, score, counts, memory_limit, deadline)
            if got is None:
                break
            score, runs, (plan, peak, cost, prof) = got
            continue
        good = []
        tried = 0
        for _, x, chain, j in _candidates(p, runs, prof, idx, counts, level, strategy, forbid):
            extra = sum((Fraction(p.costs[v]) for v in chain), Fraction(0))
            if question == "min_peak" and Fraction(cost) + extra > Fraction(cost_budget):
                continue
            new = runs[:j] + list(chain) + runs[j:]
            cand = _profile(p, new)
            sc = _score(question, memory_limit, cand[1], cand[3])
            if sc < score:
                # exact drop of the score per unit of extra cost (free re-runs first)
                rate = (score[0] - sc[0], score[1] - sc[1]) if extra == 0 else \
                    (Fraction(score[0] - sc[0]) / extra, Fraction(score[1] - sc[1]) / extra)
                key = (extra != 0, tuple(-r for r in rate)) if strategy == "gain" else sc
                good.append((key, tried, sc, new, cand, chain))
            tried += 1
            if tried >= CANDIDATES or time.perf_counter() >= deadline:
                break
        if not good:
            break
        good.sort(key=lambda m: (m[0], m[1]))
        pick = 0 if rng is None else int(rng.integers(min(RANDOM_TOP, len(good))))
        _, _, score, runs, (plan, peak, cost, prof), chain = good[pick]
        for v in chain:
            counts[v] += 1
    if question == "min_cost" and peak <= memory_limit:
        return _drop_unneeded(p, runs, memory_limit, deadline)
    return _exact(p, runs)


def _apply_batch(p: RematProblem, runs, cands, score, counts, memory_limit: int, deadline: float):
    """Apply the ranked moves ``cands`` (of :func:`_candidates` on ``runs``) one after another,
    each at its position shifted by the runs inserted before it, keeping every one that lowers
    the ``min_cost`` score exactly and stopping once the plan fits. Insertions only add
    productions, so every sequence stays valid; ``counts`` (runs per op) is updated in place
    and keeps every op within its cap. Returns ``(score, runs, profile)``, or ``None`` if no
    move lowered the score."""
    inserted: list = []   # (position in ``runs`` as given, runs inserted there)
    got = None
    for _, _, chain, j in cands:
        if time.perf_counter() >= deadline:
            break
        need: dict = {}
        for v in chain:
            need[v] = need.get(v, 0) + 1
        if any(counts[v] + k > 1 + p.caps[v] for v, k in need.items()):
            continue
        at = j + sum(k for q, k in inserted if q <= j)
        new = runs[:at] + list(chain) + runs[at:]
        cand = _profile(p, new)
        sc = _score("min_cost", memory_limit, cand[1], cand[3])
        if sc >= score:
            continue
        score, runs, got = sc, new, cand
        inserted.append((j, len(chain)))
        for v, k in need.items():
            counts[v] += k
        if cand[1] <= memory_limit:
            break
    return None if got is None else (score, runs, got)


def _drop_unneeded(p: RematProblem, runs, memory_limit, deadline):
    """Remove re-runs (costliest first) while the plan still fits the limit."""
    for i in sorted(_rerun_positions(runs), key=lambda i: -Fraction(p.costs[runs[i]])):
        if time.perf_counter() >= deadline:
            break
        new = runs[:i] + [-1] + runs[i + 1:]
        trial = [v for v in new if v >= 0]
        if _profile(p, trial)[1] <= memory_limit:
            runs = new
    return _exact(p, [v for v in runs if v >= 0])


def _rerun_positions(runs) -> list[int]:
    """Positions of the runs that are not the first run of their op."""
    seen: set = set()
    out = []
    for i, v in enumerate(runs):
        if v in seen:
            out.append(i)
        seen.add(v)
    return out


def reorder_runs(p: RematProblem, runs, memory_limit: int, *, deadline: float, window: int = REORDER_WINDOW):
    """Move single runs to lower the overflow above ``memory_limit`` without adding any: while
    the plan does not fit, try every run within ``window`` positions of the highest one at
    every place within ``window`` positions of it, and take the move that lowers the score of
    :func:`_score` most (the same runs, so the same extra cost). A move that makes a run read
    a tensor not produced before it is skipped. Returns ``(runs, plan, peak, cost)``."""
    runs = [int(v) for v in runs]
    plan, peak, cost, prof = _profile(p, runs)
    score = _score("min_cost", memory_limit, peak, prof)
    while score[0] > 0 and time.perf_counter() < deadline:
        idx = max(range(len(runs)), key=lambda i: prof[i])
        best = None
        for q in range(max(0, idx - window), min(len(runs), idx + window + 1)):
            rest = runs[:q] + runs[q + 1:]
            for d in range(max(0, q - window), min(len(runs), q + window + 1)):
                if d == q:
                    continue
                new = rest[:d] + [runs[q]] + rest[d:]
                try:
                    cand = _profile(p, new)
                except ScheduleError:
                    continue  # a read moved before every production of its tensor
                sc = _score("min_cost", memory_limit, cand[1], cand[3])
                if sc < score and (best is None or sc < best[0]):
                    best = (sc, new, cand)
            if time.perf_counter() >= deadline:
                break
        if best is None:
            break
        score, runs, (plan, peak, cost, prof) = best
    return _exact(p, runs)


def improve_by_lns(p: RematProblem, runs, memory_limit: int, *, deadline: float, seed: int = 0,
                   patience: int = LNS_PATIENCE):
    """Large-neighbourhood search on a run sequence within ``memory_limit``: *ruin* by removing
    some re-runs (one re-run, costliest first, then random sets of 2-4 re-runs near each other,
    drawn by cost), *recreate* with :func:`improve_runs` (re-runs inserted until the plan fits
    again, the removed ops tabu, a random one of the best moves; then the unneeded re-runs
    dropped). A cheaper result replaces the current plan; a dearer one within
    :data:`LNS_SLACK` of the best does so with probability :data:`LNS_ACCEPT_WORSE` (to leave
    a local optimum: a step of simulated annealing at a fixed temperature). Removing a re-run
    keeps a run sequence valid (the op's first run precedes it). Stops at the deadline or
    after ``patience`` ruins in a row without a new best (fewer for a plan with few re-runs:
    :data:`LNS_PATIENCE_PER_RERUN`). Returns ``(runs, plan, peak, cost,
    stats)`` of the best plan seen: it never costs more than the given one and always fits."""
    rng = np.random.default_rng(seed)
    runs, plan, peak, cost = _exact(p, runs)
    if peak > memory_limit:
        raise InternalError("remat-lns", f"improve_by_lns needs a plan within the limit; this one peaks at {peak}")
    best = (runs, plan, peak, cost)
    stats = {"ruins": 0, "improved": 0, "start_cost": cost}
    tried_single: set = set()
    stale = 0
    while time.perf_counter() < deadline:
        pos = _rerun_positions(runs)
        # a few ruins per re-run: small plans give up sooner
        if not pos or stale >= min(patience, LNS_PATIENCE_PER_RERUN * (len(pos) + 2)):
            break
        # first every single re-run (costliest first, each op once per current plan), then random groups
        key = tuple(runs)
        single = [i for i in sorted(pos, key=lambda i: (-Fraction(p.costs[runs[i]]), i))
                  if (runs[i], key) not in tried_single]
        if single:
            drop = {single[0]}
            tried_single.add((runs[single[0]], key))
        else:
            weights = np.array([float(p.costs[runs[i]]) + 1.0 for i in pos])
            centre = int(rng.choice(len(pos), p=weights / weights.sum()))
            k = int(rng.integers(2, 5))
            near = sorted(range(len(pos)), key=lambda j: (abs(pos[j] - pos[centre]), j))[:k]
            drop = {pos[j] for j in near}
        trial = [v for i, v in enumerate(runs) if i not in drop]
        strategy = STRATEGIES[int(rng.integers(len(STRATEGIES)))] if not single else STRATEGIES[0]
        stats["ruins"] += 1
        cap = Fraction(best[3]) * (1 + LNS_SLACK)
        # moving runs may make the ruined plan fit with no re-run at all
        got = reorder_runs(p, trial, memory_limit, deadline=deadline)
        if got[2] <= memory_limit:
            stats["reordered"] = stats.get("reordered", 0) + 1
            got = _drop_unneeded(p, got[0], memory_limit, deadline)
        else:
            # the removed ops are tabu while recreating: otherwise the same re-runs come straight back
            got = improve_runs(p, got[0], "min_cost", memory_limit=memory_limit, deadline=deadline,
                               strategy=strategy, forbid=frozenset(runs[i] for i in drop),
                               rng=None if single else rng, cost_cap=cap)
        stale += 1
        if got[2] > memory_limit:
            continue
        new_cost = Fraction(got[3])
        if new_cost < Fraction(cost) or (new_cost <= cap and rng.random() < LNS_ACCEPT_WORSE):
            runs, plan, peak, cost = got
            if new_cost < Fraction(best[3]):
                best = got
                stats["improved"] += 1
                stale = 0
    return (*best, stats)


def _greedy(p: RematProblem, starts, question: str, early, deadline: float):
    """The best :func:`improve_runs` answer over every start and ranking (equal time shares).
    On a graph of at least :data:`BATCH_MIN_OPS` ops (``min_cost``) the scans apply up to
    :data:`BATCH` moves each, and feasibility comes first: until one answer fits, each try may
    use all the time left."""
    best = None
    tries = [(start, strategy) for start in starts for strategy in STRATEGIES]
    batch = BATCH if question == "min_cost" and p.n >= BATCH_MIN_OPS else 1
    for k, (start, strategy) in enumerate(tries):
        first = batch > 1 and (best is None or best[2] > early.memory_limit)  # no answer fits yet
        share = deadline if k == len(tries) - 1 or first else \
            time.perf_counter() + (deadline - time.perf_counter()) / (len(tries) - k)
        got = improve_runs(p, start, question, memory_limit=early.memory_limit,
                           cost_budget=early.cost_budget, deadline=share, strategy=strategy, batch=batch)
        if best is None or _rank(question, early.memory_limit, got) < _rank(question, early.memory_limit, best):
            best = got
    return best


def _multi_start(p: RematProblem, starts, early, seed: int, clock, extra=()):
    """``min_cost`` with the search: the greedy on ``starts``; once a plan fits, within the
    share ``heuristic.search`` of the time left on ``clock``, (1) the greedy from other orders: those of the
    relaxed graphs of its re-runs (:func:`_relaxed_orders`), then other least-peak orders of
    the scheduler (seeds ``seed + 1, ...``; new orders only, at most :data:`MAX_ORDERS` in
    all, in the share ``heuristic.orders`` of the search time), and from the least-overflow version
    of the given order and of each of these (:func:`_greedy_least_overflow`), (2) :func:`improve_by_lns` from the fitting
    plans in rounds of successive halving (each plan an equal slice of a round's time, the
    cheaper half goes on; the search stops sooner on its patience), (3) in the time the
    search leaves, again from the relaxed orders of the best plan's re-runs while that
    gives new orders. On the random layered graphs the order the
    re-runs start from matters most: the search from four least-peak orders of
    ``random_layered_n250`` ends at extra costs from 3841 to 7267. ``extra``: more starts
    (the held-tensor moves' answer) whose greedy answers join the search's pool when they fit,
    and replace the greedy's answer only when that does not fit: as one more start of the
    greedy they displaced the scheduler's order that the relaxed orders are built from
    (MobileNet at 0.8, cap 2: 625 instead of the optimum 600). Returns ``(runs, plan, peak,
    cost, stats)``, the cheapest plan seen."""
    from memopt.schedule import schedule

    M = early.memory_limit
    if p.n < BATCH_MIN_OPS:
        # feasibility first: the batched greedy from the first start (a fraction of a second on
        # the real training graphs), kept for when the single-move greedy fits nothing in its
        # time (MobileNetV3's training graph at 0.9 under a load of 10: nothing in 60 s)
        quick = [improve_runs(p, starts[0], "min_cost", memory_limit=M, batch=BATCH,
                              deadline=clock.child("heuristic.quick").end)]
    else:
        quick = []  # the greedy below is the batched one
    best = _greedy(p, starts, "min_cost", early, clock.end)
    others = [_greedy(p, [s], "min_cost", early, clock.end) for s in extra if s not in starts]
    if best[2] > M and (others or quick):
        best = min([best] + others + quick, key=lambda got: _rank("min_cost", M, got))
    stats = {"runs": len(best[0]), "orders": 1, "starts": []}
    if best[2] > M:
        return (*best, stats)
    search = clock.child("heuristic.search")
    orders = search.child("heuristic.orders")
    search_end, orders_end = search.end, orders.end
    seen = {tuple(s) for s in starts}
    fitting, k, repeats = [best] + [got for got in others if got[2] <= M and got is not best], 0, 0
    fitting += _greedy_least_overflow(p, starts[0], early, orders, seed)
    for order in _relaxed_orders(p, best[0], orders):
        if tuple(order) not in seen:
            seen.add(tuple(order))
            got = _greedy(p, [order], "min_cost", early, orders_end)
            if got[2] <= M:
                fitting.append(got)
            fitting += _greedy_least_overflow(p, order, early, orders, seed)
    while len(seen) < MAX_ORDERS and repeats < MAX_REPEATS and not orders.expired():
        k += 1
        order = schedule(p.graph, time_limit=max(0.05, orders.seconds("heuristic.schedule")),
                         seed=seed + k).order.tolist()
        if tuple(order) in seen:
            repeats += 1  # the scheduler found the same order again
            continue
        seen.add(tuple(order))
        got = _greedy(p, [order], "min_cost", early, orders_end)
        if got[2] <= M:
            fitting.append(got)
        fitting += _greedy_least_overflow(p, order, early, orders, seed + k)
    # successive halving: every plan gets an equal slice of a round's time, the cheaper half
    # goes on to the next round (the greedy's cost predicts the search's end poorly)
    pool = sorted(fitting, key=lambda g: Fraction(g[3]))
    rounds = max(1, (len(pool) - 1).bit_length()) + 1
    for r in range(rounds):
        round_end = time.perf_counter() + (search_end - time.perf_counter()) / (rounds - r)
        for i, start in enumerate(pool):
            now = time.perf_counter()
            if now >= round_end:
                break
            got = improve_by_lns(p, start[0], M, seed=seed + 1000 * r + i,
                                 deadline=now + (round_end - now) / (len(pool) - i))
            pool[i] = got[:4]
            if Fraction(got[3]) < Fraction(best[3]):
                best = got[:4]
        stats["starts"].append([pool[i][3] for i in range(len(pool))])
        pool = sorted(pool, key=lambda g: Fraction(g[3]))[:max(1, (len(pool) + 1) // 2)]
    # time the search left (it stops on its patience): start again from the relaxed orders
    # of the best plan's re-runs, as long as that finds a new order
    while not search.expired():
        fresh = [o for o in _relaxed_orders(p, best[0], search) if tuple(o) not in seen]
        if not fresh:
            break
        for order in fresh:
            seen.add(tuple(order))
            got = _greedy(p, [order], "min_cost", early, search_end)
            if got[2] > M:
                continue
            got = improve_by_lns(p, got[0], M, seed=seed + len(seen), deadline=search.child("heuristic.restart").end)
            stats["starts"].append([got[3]])
            if Fraction(got[3]) < Fraction(best[3]):
                best = got[:4]
    stats["orders"] = len(seen)
    stats["runs"] = len(best[0])
    return (*best, stats)


def _greedy_least_overflow(p: RematProblem, order, early, clock, seed: int) -> list:
    """``[greedy answer]`` from the least-overflow version of ``order``
    (:func:`memopt.remat.order_search.least_overflow_order`, within the share
    ``heuristic.overflow`` of the time left on ``clock``) if it is another order and the answer fits the limit, else
    ``[]``. The scheduler's orders have the least peak, not the least overflow above the
    limit, which is what the greedy pays for: on ``random_layered_n250`` the greedy from the
    scheduler's order costs 7126, from its least-overflow version 4637 (n500: 8108 -> 5032)."""
    from memopt.remat.order_search import least_overflow_order

    moved = least_overflow_order(p, order, early.memory_limit, seed=seed,
                                 deadline=clock.child("heuristic.overflow").end)[0]
    if moved == list(order):
        return []
    got = _greedy(p, [moved], "min_cost", early, clock.end)
    return [got] if got[2] <= early.memory_limit else []


def _relaxed_orders(p: RematProblem, runs, clock) -> list:
    """Least-peak orders of the relaxed graphs ``G_S`` and ``G_S^+`` of the set ``S`` of ops
    that ``runs`` re-runs (:func:`memopt.remat.lower_bounds.relaxed_graph`,
    :func:`~memopt.remat.lower_bounds.held_inputs_graph`): the best order when the outputs of
    ``S`` cost nothing between their reads, a start from which re-running ``S`` pays most
    (on ``random_layered_n250`` the greedy from the relaxed order of the re-runs of a
    5510 plan finds 5281, the search then 3925). ``[]`` if ``runs`` re-runs nothing."""
    from memopt.remat.lower_bounds import held_inputs_graph, relaxed_graph
    from memopt.schedule import schedule

    again = sorted({v for i, v in enumerate(runs) if v in runs[:i]})
    out = []
    if not again:
        return out
    for make in (relaxed_graph, held_inputs_graph):
        if clock.expired():
            break
        out.append(schedule(make(p.graph, again), time_limit=max(0.05, clock.seconds("heuristic.schedule")),
                            seed=0).order.tolist())
    return out


def _rank(question, memory_limit, got):
    """Sort key of an ``improve_runs`` result: answers first, then the question's order."""
    _, _, peak, cost = got
    if question == "min_cost":
        return (peak > memory_limit, Fraction(cost) if peak <= memory_limit else peak, peak)
    return (peak, Fraction(cost))


def heuristic_method(problem, *, question: str, memory_limit=None, cost_budget=None, cap=1,
                     time_limit: float = 10.0, incumbent=None, seed: int = 0, lns: bool = True, clock=None,
                     starts=()):
    """Registry method ``heuristic`` (see :mod:`memopt.remat.registry`). ``incumbent``: a plan
    whose runs are the starting sequence (default: the order of ``memopt.schedule``);
    ``starts``: a caller's warm starts, as :class:`memopt.remat.warm_start.Seed` (checked once,
    by :func:`memopt.remat.warm_start.checked_initial`), each one more start beside the
    held-tensor moves' answer (see :func:`_multi_start`'s ``extra``);
    ``lns``: run :func:`improve_by_lns` on a ``min_cost`` plan that fits (the default);
    ``clock``: the caller's :class:`memopt.clock.Clock` (else one of ``time_limit`` seconds)."""
    from memopt.remat.result import RematResult
    from memopt.time_shares import remat_clock

    t0 = time.perf_counter()
    clock = remat_clock(time_limit, clock)
    p = RematProblem.of(problem, cap)
    starts_given = list(starts)
    if not all(isinstance(s, Seed) for s in starts_given):
        raise OptionError("starts must be seeds checked by memopt.remat.warm_start.checked_initial")
    early = start_result(p, question, memory_limit, cost_budget, None, "heuristic", t0)
    if early.done and early.result.status == "infeasible":
        return early.result
    if incumbent is not None:
        runs = incumbent.runs().tolist()
        evaluate(p, incumbent)  # a bad incumbent is the caller's error, named here
    else:
        from memopt.schedule import schedule

        order = schedule(p.graph, time_limit=clock.seconds("heuristic.start_order")).order
        runs = order.tolist()
    # several starts, the cheapest answer kept: the given order, then the input order (ops
    # in id order, or the graph's topological order) -- a different order puts the peak
    # elsewhere and often needs fewer re-runs
    starts = [runs]
    ids = list(range(p.n))
    for other in (ids, p.graph.topological_order().tolist()):
        if other not in starts:
            try:
                plan_from_runs(p, other)
            except ScheduleError:
                continue  # ids not in a topological order
            starts.append(other)
            break
    from memopt.remat.held_tensors import held_tensor_moves  # it imports this module

    held = held_tensor_moves(p, runs, question, memory_limit=early.memory_limit, cost_budget=early.cost_budget,
                             deadline=clock.child("heuristic.held_tensors").end)
    given = [s.plan.runs().tolist() for s in starts_given]
    if lns and question == "min_cost":
        runs, plan, peak, cost, stats = _multi_start(p, starts, early, seed, clock, extra=[held, *given])
    else:
        more = [s for s in [held, *given] if s not in starts]
        runs, plan, peak, cost = _greedy(p, starts + more, question, early, clock.end)
        stats = {"runs": len(runs)}
    if question == "min_cost" and peak > early.memory_limit:
        # no plan within the limit: the lowest-overflow plan, status unknown
        return RematResult(plan=plan, peak=peak, extra_cost=cost, status="unknown", question=question,
                           lower_bound=early.lower, cost_lower_bound=0, memory_limit=early.memory_limit,
                           cap=list(p.caps), method="heuristic", seconds=time.perf_counter() - t0,
                           stats={**stats, "within_limit": False})
    return finish_result(p, early, plan, None, "heuristic", t0, stats)
