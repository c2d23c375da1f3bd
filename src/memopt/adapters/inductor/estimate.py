"""Inductor's own memory model (``estimate_peak_memory``'s buffer timeline) and the
itemised difference between it and the generated program's peak."""

from __future__ import annotations

import ast
import dataclasses
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from memopt.errors import InternalError

if TYPE_CHECKING:  # annotations only (capture imports this module)
    from memopt.adapters.inductor.capture import Capture
    from memopt.adapters.inductor.wrapper import _Src


@dataclass(frozen=True)
class InductorBuffer:
    """One buffer of Inductor's memory timeline (``torch._inductor.memory.compute_memory_timeline``):
    ``size_alloc`` bytes counted from scheduler step ``start``, ``size_free`` bytes released after
    step ``end`` (its last reader; ``-1``: never released, a graph output). ``graph_input``: a
    graph input Inductor counts as freeable (live from step 0 to its last reader)."""

    name: str
    size_alloc: int
    size_free: int
    start: int
    end: int
    graph_input: bool = False


@dataclass(frozen=True)
class InductorTimeline:
    """The buffer lifetimes behind Inductor's ``estimate_peak_memory`` for one scheduler order
    (``steps`` fused scheduler nodes)."""

    steps: int
    buffers: tuple

    def peak(self, buffers: Sequence[InductorBuffer] | None = None, extra: dict | None = None) -> int:
        """``estimate_peak_memory``'s arithmetic (``peak_memory_from_buf_info_list``): a buffer
        counts from its ``start`` step through its ``end`` step; ``extra`` adds bytes held during
        one step only (a step's library transient)."""
        delta = [0] * (self.steps + 2)
        for b in self.buffers if buffers is None else buffers:
            delta[b.start] += b.size_alloc
            if b.end != -1:
                delta[b.end + 1] -= b.size_free
        current = best = 0
        for t in range(self.steps + 1):
            current += delta[t]
            best = max(best, current + (extra or {}).get(t, 0))
        return best


_REUSE_LINE = re.compile(r"^[ \t]*(\w+) = (?:reinterpret_tensor\()?(\w+)\b[^;\n]*; del \2[ \t]+# reuse", re.M)


def _merge_storages(buffers: list, pairs: list, root: dict) -> list:
    """Inductor's timeline with each reuse ``new = old`` made one storage: ``new`` costs
    nothing and the storage (``old``'s chain) lives until ``new``'s last reader. ``root``
    (buffer -> the buffer it reuses) is updated, so that later merges extend the same storage."""
    by_name = {b.name: b for b in buffers}

    def find(name: str) -> str:
        while name in root:
            name = root[name]
        return name

    for new, old in pairs:
        base, nb = by_name[find(old)], by_name[new]
        end = -1 if -1 in (base.end, nb.end) else max(base.end, nb.end)
        by_name[base.name] = dataclasses.replace(base, end=end)
        by_name[new] = dataclasses.replace(nb, size_alloc=0, size_free=0)
        root[new] = base.name
    return list(by_name.values())


_ALIAS_LINE = re.compile(r"^[ \t]*(\w+) = reinterpret_tensor\((\w+)\b[^\n]*# alias", re.M)
_NOT_KERNELS = ("empty_strided_cpu", "empty_strided", "torch.empty_strided", "reinterpret_tensor",
                "assert_size_stride", "assert_alignment")


def _kernel_groups(src: "_Src", known: dict) -> tuple[dict, dict]:
    """Scheduler steps the wrapper runs as one call (Inductor's C++ backend emits consecutive
    scheduler nodes as one ``cpp_fused_*`` function): ``(step -> first step of its call,
    step -> last step of its call)``. A step's call is the statement that binds one of its
    buffers to a kernel's result (``bufN = extern_kernels...``, ``bufN = bufT[0]``), else the
    first kernel call statement (``cpp_fused_*(...)``, ``extern_kernels.mm(..., out=...)``)
    that names one of them; a step with neither (a concatenation's no-op node) is its own."""
    call_of_step: dict[int, int] = {}
    for i, node in enumerate(src.body):
        value = node.value if isinstance(node, (ast.Expr, ast.Assign)) else None
        is_kernel = isinstance(value, ast.Call) and ast.unparse(value.func) not in _NOT_KERNELS
        if isinstance(node, ast.Assign) and (is_kernel or isinstance(value, ast.Subscript)):
            for t in node.targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name) and n.id in known:
                        call_of_step.setdefault(known[n.id].start, i)
        elif is_kernel:  # a C++ kernel call: every buffer it names that no earlier call produced
            for n in ast.walk(node):
                if isinstance(n, ast.Name) and n.id in known:
                    call_of_step.setdefault(known[n.id].start, i)
    steps_of_call: dict[int, list] = {}
    for step, call in call_of_step.items():
        steps_of_call.setdefault(call, []).append(step)
    first = {t: min(ts) for ts in steps_of_call.values() for t in ts}
    last = {t: max(ts) for ts in steps_of_call.values() for t in ts}
    return first, last


def _merge_views(buffers: list, views: list) -> list:
    """Inductor's timeline with each ``view = reinterpret_tensor(base, ...)  # alias`` (a
    buffer Inductor plans on its own, written into a slice of ``base``, e.g. a concatenation's
    input) costing nothing and ``base`` live from the view's step to the end of both."""
    by_name = {b.name: b for b in buffers}
    for view, base in views:
        v, b = by_name[view], by_name[base]
        end = -1 if -1 in (v.end, b.end) else max(v.end, b.end)
        by_name[base] = dataclasses.replace(b, start=min(b.start, v.start), end=end)
        by_name[view] = dataclasses.replace(v, size_alloc=0, size_free=0)
    return list(by_name.values())


@dataclass(frozen=True)
class EstimateDifference:
    """One cause of the difference between Inductor's estimate and the program's peak:
    ``bytes`` is how much the peak changes when the cause is applied to Inductor's model
    (after the causes listed before it); ``buffers`` names what it concerns."""

    cause: str
    bytes: int
    buffers: tuple = ()

    def __str__(self) -> str:
        names = ", ".join(self.buffers[:6]) + (", ..." if len(self.buffers) > 6 else "")
        return f"{self.cause}: {self.bytes:+d}" + (f" ({names})" if names else "")


#: causes, in the order :func:`attribute_estimate` applies them
ESTIMATE_CAUSES = {
    "graph inputs": "Inductor counts graph inputs it deems freeable (not primals_/arg*/tangents*) from step 0 to "
                    "their last reader; the caller holds them, so the program's del frees nothing and "
                    "they are not the program's memory",
    "buffers never allocated": "a buffer the estimate allocates that the generated program never names: the "
                               "C++ backend kept it inside the fused kernel (a local buffer, removed after scheduling)",
    "kernel groups": "consecutive scheduler nodes the C++ backend emits as one cpp_fused_* call allocate all "
                     "their outputs before the call and free their dead inputs after it; the estimate frees and "
                     "allocates between the nodes (allocation and free at different steps, cf. pytorch#160113)",
    "views": "a buffer the estimate plans on its own that the wrapper writes into a slice of another "
             "(`bufM = reinterpret_tensor(bufN, ...)  # alias`, a concatenation's inputs) costs nothing, and its "
             "base is allocated from the view's step",
    "in-place reuse": "a kernel that writes its output into its dying input's buffer (in_out_ptr, "
                      "`bufM = bufN; del bufN  # reuse` before it) holds one buffer; the estimate counts both "
                      "during that step (pytorch#192578)",
    "reuse of an input buffer": "the wrapper writes a result into a graph input's buffer (donated); the "
                                "estimate allocates it",
    "buffer reuse": "a buffer freed at one step and reused by a later allocation stays allocated in between "
                    "(pytorch#145883); the estimate frees it after its last reader",
    "library transients": "memory a library kernel allocates and frees inside its call (extern_kernels / ATen "
                          "fallbacks: oneDNN weight reorders, im2col), measured per statement",
}


def attribute_estimate(cap: "Capture") -> list[EstimateDifference]:
    """Itemise ``program peak - Inductor's estimate`` for a capture's stock order.

    Starting from Inductor's own timeline (``cap.inductor_timeline``, whose peak is
    ``cap.inductor_estimate``), the causes of :data:`ESTIMATE_CAUSES` are applied one after
    the other, each a change of that timeline to what the generated program does; the
    difference each makes to the peak is its share. A last item ``unattributed`` holds what
    is left (``program peak - the fully corrected timeline``; zero when the causes explain
    everything). So ``estimate + sum(bytes) == cap.program.peak()`` (the stock program's
    modelled peak, equal to the measured one) always holds; an empty list means no
    timeline was recorded."""
    tl = cap.inductor_timeline
    if tl is None or cap.inductor_estimate is None:
        return []
    if tl.peak() != cap.inductor_estimate:
        raise InternalError("inductor-timeline", f"the recorded timeline peaks at {tl.peak()}, "
                                                 f"Inductor estimated {cap.inductor_estimate}")
    out: list[EstimateDifference] = []
    buffers = list(tl.buffers)
    current = tl.peak(buffers)

    def apply(cause: str, new_buffers: list, names, extra=None):
        nonlocal buffers, current
        buffers = new_buffers
        peak = tl.peak(buffers, extra)
        out.append(EstimateDifference(cause, peak - current, tuple(names)))
        current = peak

    apply("graph inputs", [b for b in buffers if not b.graph_input], [b.name for b in buffers if b.graph_input])
    named = {n.id for node in cap._src.body for n in ast.walk(node) if isinstance(n, ast.Name)}
    removed = [b.name for b in buffers if b.name not in named and b.size_alloc]
    apply("buffers never allocated", [b for b in buffers if b.name in named], removed)
    known = {b.name: b for b in buffers}
    first_step, last_step = _kernel_groups(cap._src, known)
    grouped = [dataclasses.replace(b, start=first_step.get(b.start, b.start),
                                   end=b.end if b.end == -1 else last_step.get(b.end, b.end)) for b in buffers]
    apply("kernel groups", grouped, sorted({f"steps {first_step[t]}-{last_step[t]}" for t in first_step
                                            if first_step[t] != last_step[t]}, key=lambda x: int(x.split()[1].split("-")[0])))
    views = [(v, b) for v, b in _ALIAS_LINE.findall(cap.source) if v in known and b in known]
    apply("views", _merge_views(buffers, views), [f"{v}->{b}" for v, b in views])
    known = {b.name: b for b in buffers}
    inplace, cross, into_input = [], [], []
    for new, old in _REUSE_LINE.findall(cap.source):
        if new not in known:
            continue
        if old not in known:
            into_input.append((new, old))
        elif known[old].end == known[new].start:  # old's last reader is the kernel producing new
            inplace.append((new, old))
        else:
            cross.append((new, old))
    storage_of: dict[str, str] = {}
    apply("in-place reuse", _merge_storages(buffers, inplace, storage_of), [f"{n}={o}" for n, o in inplace])
    zeroed = {n for n, _ in into_input}
    apply("reuse of an input buffer", [dataclasses.replace(b, size_alloc=0, size_free=0) if b.name in zeroed else b
                                       for b in buffers], [f"{n}={o}" for n, o in into_input])
    apply("buffer reuse", _merge_storages(buffers, cross, storage_of), [f"{n}={o}" for n, o in cross])
    # a statement's transient is held during the step of the buffer it binds
    step_of = {b.name: b.start for b in tl.buffers}
    extra: dict[int, int] = {}
    names = []
    for stmt, node in zip(cap.program.statements, cap._src.body):
        if stmt.transient:
            steps = [step_of[n.id] for n in ast.walk(node)
                     if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id in step_of]
            if steps:
                extra[max(steps)] = max(extra.get(max(steps), 0), int(stmt.transient))
                names.append(stmt.name)
    apply("library transients", buffers, names, extra)
    out.append(EstimateDifference("unattributed", cap.program.peak() - current))
    return out

