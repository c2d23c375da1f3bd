"""Re-run placement for a fixed order of first runs: Checkmate's stage model in CP-SAT.

The model (Checkmate, Jain et al., MLSys 2020, ``parasj/checkmate``,
``checkmate/core/solvers/gurobi_solver.py``: stages, ``R``, ``S``, ``FREE``; written from
the formulation, not the code, over memopt's plan model of ``docs/remat.md``). Fix an order
``pi`` of the ops (a topological order: the order of their *first* runs). Stage ``t < n``
runs ``pi[t]`` for the first time, after re-running any set of earlier ops ``pi[i]``, ``i < t``
(``R[t,i]``), in the order of ``pi``; a last stage ``n`` may re-run ops after every first run
(to re-make a graph output at the end). So a plan of the model is the run sequence

    for t in 0..n:  [pi[i] for i < t with R[t,i]] + [pi[t]]      (no first run in stage n)

with every production freed as early as possible
(:func:`~memopt.remat.model_common.plan_from_runs`). Variables, per stage ``t``:

* ``R[t,i]``: re-run ``pi[i]`` in stage ``t`` (``sum_t R[t,i] <= cap(pi[i])``);
* ``S[t,x]``: tensor ``x`` is live at the start of stage ``t``; ``S[t+1,x] <= S[t,x] + R[t,prod x]``
  (kept, or made in stage ``t``); graph outputs ``S[n+1,x] = 1``; graph inputs that are read or kept ``S[0,x] = 1``;
* a run needs its inputs: ``R[t,m] <= S[t,x] + R[t,prod x]`` for each input ``x`` of ``pi[m]``;
  ``S[t,x] + R[t,prod x] <= 1`` (a held copy could serve no reader in the stage: they all
  come after its producer);
* ``F[t,x,m]``: ``x`` is freed right after its reader ``pi[m]`` in stage ``t`` (``F <= R[t,m]``,
  ``F <= 1 - R[t,m']`` for later readers ``m'``, ``F <= 1 - S[t+1,x]``), or right after it is
  made if nobody reads it in the stage;
* memory before each position ``k`` of stage ``t``: ``L[t,k]`` = bytes held at the start plus
  the outputs made before ``k`` minus the frees before ``k`` (an integer per position: the
  within-stage accounting of Checkmate's ``U``), and ``L[t,k] + (out(pi[k]) + w(pi[k])) R[t,k]
  <= M - resident``. Without the enforcement literal this is still exact: at a position that
  does not run, ``L`` equals ``L`` at the next run (nothing changes in between), and the last
  position of a stage ``t < n`` always runs.
* canonical form (loses no optimum): a re-run's output is read in its stage or kept
  (``R[t,i] <= sum R[t,readers] + S[t+1,x]``), a tensor is held into stage ``t`` only if it
  is read there or kept (``S[t,x] <= sum R[t,readers] + S[t+1,x]``).

Objective: the extra cost ``sum c(pi[i]) R[t,i]``.

**What it covers, exactly.** Call a run sequence *staged* for ``pi`` if it has the form
above (each op at most once per stage, the re-runs of a stage in ``pi`` order). For a staged
sequence whose frees-as-early-as-possible plan fits ``M``, setting ``R`` from it, ``S`` and
``F`` to that plan's liveness and ``L`` to its memory satisfies every constraint (dropping
re-runs nobody reads first, which lowers cost and memory); conversely in every solution
the live intervals of the model contain those of :func:`plan_from_runs` of its sequence (a
free the model does not take only keeps a tensor longer), so that plan's memory is at most
``L`` at every run. Hence the model's optimum is the least extra cost over staged sequences
for ``pi`` (within the caps) whose plan fits ``M`` — exact over that subset, an
upper-bound generator for the problem. Every plan it returns is still built by
:func:`plan_from_runs` and evaluated exactly. With ``reach`` set, ``R[t,i]`` exists only for
ops ``i`` *near* stage ``t`` (below); the model is then exact over staged sequences whose
re-runs are all near their stage.

*Near* (``reach = d``): ``pi[i]`` is near stage ``t`` if its output is read by ``pi[m]``,
``m >= t`` (it crosses the stage: the tensors a re-run can free) or is a graph output, or
if it produces an input of an op near ``t`` within ``d`` such steps (a chain re-made in the
stage), or if the hint re-runs it in stage ``t``.

What it shows on the random layered graphs (0.9, cap 2; ``benchmarks/README.md``): the
heuristic's plans are already optimal among the staged sequences of their own first-run
order — on ``random_layered_n100`` the whole model with ``reach=0`` / ``1`` proves the 918 plan
so, and windows of 20-40 stages (:func:`improve_by_stages`) prove it for 21
of 23 windows of the 3356 plan of ``n250`` and 34 of 34 of a 3621 plan of ``n500``, where
the ruin-and-recreate search, which also moves first runs, goes on to 2813. What is left on
these graphs is the order of first runs, which this model fixes; the heuristic does not
call it. The whole model is too large there even with ``reach=0`` (on ``n250`` it found no
better plan within a 200 s limit, 2026-11-30, 2-core machine); windows are what scales.

Example
-------
>>> from memopt.core import Op, Tensor, TensorGraph
>>> from memopt.remat.model_common import RematProblem
>>> g = TensorGraph.build(
...     [Tensor("a", 10), Tensor("b", 20), Tensor("c", 20), Tensor("d", 1, output=True)],
...     [Op("fa", (), ("a",), cost=1), Op("fb", ("a",), ("b",), cost=5),
...      Op("fc", ("b",), ("c",), cost=5), Op("fd", ("a", "c"), ("d",), cost=5)])
>>> p = RematProblem.of(g, 1)
>>> got = solve_stages(p, [0, 1, 2, 3], memory_limit=40, time_limit=5)
>>> got["runs"], got["extra_cost"], got["status"]
([0, 1, 2, 0, 3], 1, 'optimal')
"""

from __future__ import annotations

import time
from fractions import Fraction

from memopt.clock import solve_by
from memopt.errors import InternalError, OptionError
from memopt.remat.model_common import RematProblem, byte_scale, cost_scale, evaluate, footprint_bound, plan_from_runs

__all__ = ["solve_stages", "staged_reruns", "staged_runs", "first_run_order"]


def first_run_order(runs) -> list[int]:
    """The ops of ``runs`` in the order of their first runs."""
    seen: set = set()
    out = []
    for v in runs:
        v = int(v)
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


def staged_runs(order, reruns) -> list[int]:
    """The run sequence of a stage solution: ``reruns[t]`` (op ids, in ``order``), then
    ``order[t]``, for every stage; ``reruns[len(order)]`` after the last first run."""
    seq: list[int] = []
    for t, rr in enumerate(reruns):
        seq.extend(rr)
        if t < len(order):
            seq.append(int(order[t]))
    return seq


def staged_reruns(p: RematProblem, runs, order) -> list[list[int]]:
    """``runs`` in stage form for ``order``: the re-runs between two first runs belong to the
    stage of the later one, sorted by ``order`` and each op once; then re-runs whose outputs
    nobody reads before they are made again (and that are not the last production of a graph
    output) are dropped, to a fixpoint. ``runs`` must have the first runs in ``order``."""
    pos = {v: i for i, v in enumerate(order)}
    n = len(order)
    stage = 0
    sets: list[set] = [set() for _ in range(n + 1)]
    seen: set = set()
    for v in runs:
        v = int(v)
        if v in seen:
            sets[stage].add(pos[v])
        else:
            if pos[v] != stage:
                raise OptionError(f"op {p.graph.op_names[v]!r}: first runs are not in the given order")
            seen.add(v)
            stage += 1
    while True:
        reruns = [sorted(s) for s in sets]
        seq = [(t, i) for t in range(n + 1) for i in reruns[t] + ([t] if t < n else [])]
        useless = _unread_reruns(p, order, seq)
        if not useless:
            return [[order[i] for i in rr] for rr in reruns]
        for t, i in useless:
            sets[t].discard(i)


def _unread_reruns(p: RematProblem, order, seq) -> list:
    """The ``(stage, position)`` re-runs of ``seq`` none of whose outputs is read before it
    is made again, nor kept to the end as a graph output."""
    outputs = set(p.outputs)
    made_at: dict = {}     # tensor -> index in seq of its current production
    used: set = set()      # indices in seq whose production some run read
    first: set = set()
    seen: set = set()
    for k, (t, i) in enumerate(seq):
        v = order[i]
        if v not in seen:
            first.add(k)
            seen.add(v)
        for x in p.ins[v]:
            if x in made_at:
                used.add(made_at[x])
        for x in p.outs[v]:
            made_at[x] = k
    for x, k in made_at.items():
        if x in outputs:
            used.add(k)
    return [seq[k] for k in range(len(seq)) if k not in first and k not in used]


def _near(p: RematProblem, order, reach) -> list[set]:
    """Per stage ``t`` (``0..n``), the positions ``i < t`` whose re-run the model allows (see
    the module docstring; ``reach=None``: every earlier position)."""
    n = len(order)
    pos = {v: i for i, v in enumerate(order)}
    if reach is None:
        return [set(range(t)) for t in range(n + 1)]
    last_read = [-1] * n    # the latest position reading an output of position i
    outputs = set(p.outputs)
    is_out = [any(x in outputs for x in p.outs[v]) for v in order]
    for m, v in enumerate(order):
        for x in p.ins[v]:
            u = p.producer[x]
            if u >= 0:
                last_read[pos[u]] = max(last_read[pos[u]], m)
    producers = [sorted({pos[p.producer[x]] for x in p.ins[v] if p.producer[x] >= 0}) for v in order]
    near = []
    for t in range(n + 1):
        level = {i for i in range(t) if last_read[i] >= t or is_out[i]}
        got = set(level)
        for _ in range(reach):
            level = {j for i in level for j in producers[i]} - got
            got |= level
        near.append(got)
    return near


def _held(p: RematProblem, n: int, on, readers, prod, tensors) -> list[set]:
    """Per stage ``0..n+1``, the tensors live at its start in the frees-as-early-as-possible
    plan of the staged sequence that runs the positions ``on[t]`` in stage ``t``: a production
    made in stage ``a`` is held into the stages after ``a`` up to its last read before the next
    production (to the end for the last production of a graph output)."""
    outputs = set(p.outputs)
    held = [set() for _ in range(n + 2)]
    for x in tensors:
        made = [t for t in range(n + 1) if prod[x] in on[t]] if prod[x] >= 0 else [-1]
        for k, a in enumerate(made):
            b = made[k + 1] if k + 1 < len(made) else n + 1
            last = max([t for t in range(a + 1, min(b, n + 1)) if any(mm in on[t] for mm in readers[x])],
                       default=-1)
            if k + 1 == len(made) and x in outputs:
                last = n + 1
            for t in range(a + 1, last + 1):
                held[t].add(x)
    return held


def solve_stages(p: RematProblem, runs, memory_limit: int, *, time_limit: float, reach=None, order=None,
                 window=None, seed: int = 0, num_workers: int = 1, strict: bool = True, parameters=None) -> dict:
    """Minimise the extra cost over the staged run sequences for the first-run order of
    ``runs`` (or ``order``), with ``runs`` (put in stage form) as the hint; ``strict``: ask
    only for plans cheaper than that hint when it fits (then *infeasible* proves it optimal
    among staged sequences). ``window=(a, b)``: only the re-runs of stages ``a..b-1`` are
    free, the others and the tensors live at the start of stages ``a`` and ``b`` are the
    hint's (a neighbourhood: memory outside the window can only drop, since the same runs
    there find at most the same tensors live; so a window is solved only when the staged
    hint fits, else it returns ``unknown`` at once). Returns a dict: ``runs`` / ``plan`` / ``peak``
    / ``extra_cost`` of the cheaper of the model's plan and the staged hint (``None`` if
    neither fits), ``status`` (``optimal``: the least cost over staged sequences [in the
    window], ``feasible``, ``unknown``), ``hint_cost`` (the staged hint's cost if it fits),
    ``stats``. Every plan is built by :func:`plan_from_runs` and evaluated exactly; a model
    plan above ``memory_limit`` is a bug (:class:`InternalError`). ``parameters``: extra
    CP-SAT parameters (name: value), e.g. ``{"fix_variables_to_their_hinted_value": True}``
    to check that the hint is a solution."""
    from ortools.sat.python import cp_model

    t0 = time.perf_counter()
    runs = [int(v) for v in runs]
    order = first_run_order(runs) if order is None else [int(v) for v in order]
    if sorted(order) != list(range(p.n)):
        raise OptionError("the order of first runs must name every op once")
    n = len(order)
    a0, b0 = (0, n + 1) if window is None else (max(0, int(window[0])), min(n + 1, int(window[1])))
    pos = {v: i for i, v in enumerate(order)}
    hint = staged_reruns(p, runs, order) if runs else [[] for _ in range(n + 1)]
    hint_runs = staged_runs(order, hint)
    hint_pk, hint_cost = evaluate(p, plan_from_runs(p, hint_runs))
    hint_fits = hint_pk <= memory_limit
    result = {"runs": None, "plan": None, "peak": None, "extra_cost": None, "status": "unknown",
              "hint_cost": hint_cost if hint_fits else None, "stats": {}}
    if hint_fits:
        result.update(runs=hint_runs, plan=plan_from_runs(p, hint_runs), peak=hint_pk, extra_cost=hint_cost)
    if footprint_bound(p) > memory_limit:
        result["status"] = "infeasible"
        return result
    if a0 >= b0 or (not hint_fits and (a0, b0) != (0, n + 1)):
        # outside a window the hint's stages are kept unchecked: only a fitting hint bounds them
        return result

    g = byte_scale(p)
    room = (memory_limit - p.resident_bytes) // g
    size = [s // g for s in p.size]
    costs, factor, exact = cost_scale(p)
    stages = range(a0, b0)
    near = _near(p, order, reach)
    on = [set(pos[v] for v in hint[t]) | ({t} if t < n else set()) for t in range(n + 1)]
    for t in range(n + 1):
        near[t] = near[t] | (on[t] - {t}) if t in stages else set()
    ops = [order[i] for i in range(n)]
    tensors = [x for x in range(p.num_tensors) if not p.resident[x]]
    prod = {x: (pos[p.producer[x]] if p.producer[x] >= 0 else -1) for x in tensors}
    readers = {x: [] for x in tensors}
    for mm, v in enumerate(ops):
        for x in p.ins[v]:
            readers[x].append(mm)
    held = _held(p, n, on, readers, prod, tensors)
    # positions runnable in stage t, ascending (the stage's own first run last)
    runnable = [sorted(near[t]) + ([t] if t < n else []) if t in stages else [] for t in range(n + 1)]
    last_stage = [-1] * n    # the last stage of the window in which position i may run
    for t in stages:
        for i in runnable[t]:
            last_stage[i] = max(last_stage[i], t)

    m = cp_model.CpModel()
    R = [dict() for _ in range(n + 1)]       # R[t][i]: a BoolVar, or 1 for the first run
    for t in stages:
        for i in near[t]:
            R[t][i] = m.new_bool_var(f"R{t}_{i}")
        if t < n:
            R[t][t] = 1

    def r(t, i):
        return R[t].get(i, 0) if 0 <= t <= n else 0

    # S[t][x] for the window's stages (and b): a BoolVar or a constant; a variable only where
    # x may be needed later (read in the window, or live at the start of stage b)
    S = [dict() for _ in range(n + 2)]
    for x in tensors:
        until = b0 if x in held[b0] else last_stage[max(readers[x], key=lambda mm: last_stage[mm])] \
            if readers[x] else -1
        for t in range(max(a0 + 1, prod[x] + 1), min(until, b0 - 1) + 1):
            S[t][x] = m.new_bool_var(f"S{t}_{x}")
        if x in held[a0]:
            S[a0][x] = 1
        if x in held[b0]:
            S[b0][x] = 1

    def s(t, x):
        return S[t].get(x, 0)

    def le_sum(lhs, terms):
        """lhs <= sum(terms) for 0/1 terms (vars or constants)."""
        const = sum(v for v in terms if isinstance(v, int))
        var = [v for v in terms if not isinstance(v, int)]
        if isinstance(lhs, int):
            if lhs > const:
                m.add(sum(var) >= lhs - const)
        elif const == 0:
            m.add(lhs <= sum(var))

    stage_readers = [dict() for _ in range(n + 1)]
    for t in stages:
        for mm in runnable[t]:
            for x in p.ins[ops[mm]]:
                stage_readers[t].setdefault(x, []).append(mm)
    # data flow, canonical form
    for t in stages:
        for mm in runnable[t]:
            for x in p.ins[ops[mm]]:
                le_sum(r(t, mm), [s(t, x), r(t, prod[x])])
        for x in tensors:
            here, made = s(t, x), r(t, prod[x])
            if not isinstance(here, int) and not isinstance(made, int):
                m.add(here + made <= 1)
            elif isinstance(here, int) and here == 1 and not isinstance(made, int):
                m.add(made == 0)
            nxt = s(t + 1, x)
            if not (isinstance(nxt, int) and nxt == 0):
                le_sum(nxt, [here, made])
            later = [r(t, mm) for mm in stage_readers[t].get(x, [])] + [nxt]
            if not isinstance(here, int):
                le_sum(here, later)
        for i in near[t]:
            le_sum(R[t][i], [v for x in p.outs[ops[i]] if not p.resident[x]
                             for v in [r(t, mm) for mm in stage_readers[t].get(x, [])] + [s(t + 1, x)]])
    for i in range(n):
        extra = [R[t][i] for t in stages if i in near[t]]
        left = p.caps[ops[i]] - sum(1 for t in range(n + 1) if t not in stages and i in on[t] and i != t)
        if len(extra) > left:
            m.add(sum(extra) <= left)

    # frees and memory, stage by stage
    frees_after = [dict() for _ in range(n + 1)]   # frees_after[t][k]: [(var, size, tensor)]
    n_frees = 0
    for t in stages:
        for x in tensors:
            if (x not in S[t] and not (prod[x] >= 0 and prod[x] in R[t])) or size[x] == 0:
                continue
            keep = s(t + 1, x)
            if isinstance(keep, int) and keep == 1:
                continue
            rd = stage_readers[t].get(x, [])
            spots = ([prod[x]] if prod[x] in R[t] else []) + rd
            for spot in spots:
                later = [r(t, mm) for mm in rd if mm > spot]
                if any(isinstance(v, int) and v == 1 for v in later):
                    continue  # the stage's own first run reads it later
                mine = r(t, spot)
                f = m.new_bool_var(f"F{t}_{x}_{spot}")
                n_frees += 1
                if not isinstance(mine, int):
                    m.add_implication(f, mine)
                for v in later:
                    m.add_implication(f, v.Not())
                if not isinstance(keep, int):
                    m.add_implication(f, keep.Not())
                frees_after[t].setdefault(spot, []).append((f, size[x], x))
    L = [dict() for _ in range(n + 1)]
    for t in stages:
        level = sum(size[x] * v for x, v in S[t].items())
        for k in runnable[t]:
            v = ops[k]
            cur = m.new_int_var(0, room, f"L{t}_{k}")
            m.add(cur == level)
            L[t][k] = cur
            out = sum(size[x] for x in p.outs[v] if not p.resident[x])
            m.add(cur + (out + p.ws[v] // g) * r(t, k) <= room)
            level = cur + out * r(t, k) - sum(sz * f for f, sz, _ in frees_after[t].get(k, []))
    objective = sum(costs[ops[i]] * R[t][i] for t in stages for i in near[t])
    hint_window = sum(costs[ops[i]] for t in stages for i in on[t] if i != t)
    if strict and hint_fits and exact:
        m.add(objective <= hint_window - 1)
    m.minimize(objective)
    _hint(m, p, n, on, held, R, S, frees_after, L, size, ops, prod, stages, runnable, readers)

    solver = cp_model.CpSolver()
    solver.parameters.num_workers = int(num_workers)
    solver.parameters.random_seed = int(seed)
    for name, value in (parameters or {}).items():
        setattr(solver.parameters, name, value)
    build = time.perf_counter() - t0
    st = solve_by(solver, m, t0 + float(time_limit))
    stats = {"stages": len(stages), "R": sum(len(near[t]) for t in stages), "S": sum(len(x) for x in S),
             "F": n_frees, "build_seconds": round(build, 3), "solver": "dropped_at_deadline" if st is None else solver.status_name(st),
             "seconds": round(time.perf_counter() - t0, 3)}
    result["stats"] = stats
    if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        reruns = [[ops[i] for i in sorted(near[t]) if solver.boolean_value(R[t][i])] if t in stages
                  else list(hint[t]) for t in range(n + 1)]
        new = staged_runs(order, reruns)
        plan = plan_from_runs(p, new)
        pk, cost = evaluate(p, plan)
        if pk > memory_limit:
            raise InternalError("stage-model", f"the stage model's plan peaks at {pk}, above the limit "
                                               f"{memory_limit} it was solved for")
        if result["extra_cost"] is None or Fraction(cost) < Fraction(result["extra_cost"]):
            result.update(runs=new, plan=plan, peak=pk, extra_cost=cost)
    if exact and (st == cp_model.OPTIMAL or (st == cp_model.INFEASIBLE and strict and hint_fits)):
        result["status"] = "optimal"
    elif st == cp_model.INFEASIBLE and not (strict and hint_fits):
        result["status"] = "infeasible"
    elif result["runs"] is not None:
        result["status"] = "feasible"
    return result


def _hint(m, p: RematProblem, n, on, held, R, S, frees_after, L, size, ops, prod, stages, runnable,
          readers) -> None:
    """Hint every variable with the staged hint's frees-as-early-as-possible plan."""
    for t in stages:
        for i, v in R[t].items():
            if not isinstance(v, int):
                m.add_hint(v, i in on[t])
    for t in range(n + 2):
        for x, v in S[t].items():
            if not isinstance(v, int):
                m.add_hint(v, x in held[t])
    for t in stages:
        level = sum(size[x] for x in S[t] if x in held[t])
        for k in runnable[t]:
            m.add_hint(L[t][k], level)
            if k in on[t]:
                level += sum(size[x] for x in p.outs[ops[k]] if not p.resident[x])
            for f, sz, x in frees_after[t].get(k, []):
                live_here = x in held[t] or (prod[x] in on[t] and prod[x] <= k)
                last_here = not any(mm > k and mm in on[t] for mm in readers[x])
                val = k in on[t] and live_here and last_here and x not in held[t + 1]
                m.add_hint(f, val)
                if val:
                    level -= sz


#: stages per window of :func:`improve_by_stages` ...
WINDOW = 24
#: ... and the CP-SAT seconds per window (at most)
WINDOW_SECONDS = 5.0


def improve_by_stages(p: RematProblem, runs, memory_limit: int, *, deadline: float, width: int = WINDOW,
                      reach=None, seconds: float = WINDOW_SECONDS, seed: int = 0) -> dict:
    """Windows of ``width`` stages (half overlapping) over the first-run order of ``runs``,
    each solved by :func:`solve_stages` with the current plan as hint (strict: only cheaper
    plans), the cheaper plan kept; sweeps until a sweep improves nothing or ``deadline``.
    Returns the :func:`solve_stages`-like dict of the best plan (the staged ``runs`` if
    nothing is cheaper, or ``runs`` itself, status ``unknown``, if its staged form does not
    fit), with ``stats``: windows solved, improved, proved (no cheaper plan in the window).
    ``runs`` must fit ``memory_limit`` (:class:`OptionError` otherwise)."""
    runs = [int(v) for v in runs]
    order = first_run_order(runs)
    n = len(order)
    best = solve_stages(p, runs, memory_limit, time_limit=0.0, window=(0, 0))
    if best["runs"] is None:
        # staging moves re-runs (into the order of first runs, one per op and stage), which
        # can raise the peak of a plan that fits; a window needs a fitting hint (its stages
        # outside are not checked): ``runs`` is returned as it is
        plan = plan_from_runs(p, runs)
        pk, cost = evaluate(p, plan)
        if pk > memory_limit:
            raise OptionError(f"improve_by_stages: the given runs peak at {pk}, above the limit {memory_limit}")
        best = {"runs": runs, "plan": plan, "peak": pk, "extra_cost": cost, "status": "unknown",
                "hint_cost": None, "stats": {}}
    stats = {"windows": 0, "improved": 0, "proved": 0, "start_cost": best["extra_cost"]}
    step = max(1, width // 2)
    improved = best["hint_cost"] is not None
    while improved and time.perf_counter() < deadline:
        improved = False
        for a in range(0, n + 1, step):
            left = deadline - time.perf_counter()
            if left <= 0:
                break
            got = solve_stages(p, best["runs"], memory_limit, time_limit=min(seconds, left), reach=reach,
                               window=(a, a + width), seed=seed)
            stats["windows"] += 1
            if got["status"] == "optimal" and Fraction(got["extra_cost"]) >= Fraction(best["extra_cost"]):
                stats["proved"] += 1
            if Fraction(got["extra_cost"]) < Fraction(best["extra_cost"]):
                best = got
                stats["improved"] += 1
                improved = True
    best["stats"] = stats
    return best
