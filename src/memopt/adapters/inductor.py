"""PyTorch Inductor adapter: reorder the program Inductor actually generated.

:func:`capture` compiles a function with Inductor on CPU, takes the generated Python
wrapper (its ``call(args)`` body) and turns it into a memopt statement
:class:`~memopt.core.program.Program` (``docs/design.md``, statement program):

* every top-level statement of ``call`` (after the ``args`` unpacking prologue, before the
  final ``return``) is one memopt statement, carrying its source text;
* *storages* are the memory: a statement that creates a tensor whose storage did not exist
  before (``empty_strided_cpu``, an extern kernel's result, a tuple of results) allocates
  that storage, with its exact ``nbytes``; a statement that binds a name to an existing
  storage (``buf4 = buf1  # reuse``, ``reinterpret_tensor``, ``buf3[0]``) creates an alias
  that reads the storage (size 0, keeps it alive); a ``del`` frees the storage iff it drops
  the last name referring to it (in the captured order; the dependency edges keep that
  ``del`` last among the storage's users in every reordering), otherwise it reads it;
* *names* are separate buffers of size 0 (``n:buf3``), so that every permuted program is
  valid Python (a name is used only between its binding and its ``del``);
* a kernel call reads the storages of its arguments and writes the ones its signature says
  it writes: non-``const`` pointers of an Inductor C++ kernel (``out_ptr``, ``in_out_ptr``),
  the ``out=`` argument of an ``extern_kernels`` call, the mutable (``Tensor(a!)``)
  arguments of an ATen operator's schema; an unknown callee writes everything it touches
  (conservative), and any argument whose version counter moved while the statement ran is a
  write as well;
* graph inputs (parameters, user inputs) are owned by the caller: their storages are
  external, never freed and not counted; returned buffers are never freed;
* a statement's *transient* is measured: the statement is run alone under PyTorch's CPU
  memory profiler, and ``transient = (highest bytes allocated during it) - (its net
  allocation)`` (zero for statements that only free).

:func:`optimize` schedules that program with :func:`memopt.schedule`, emits the permuted
wrapper source, loads it with ``PyCodeCache.load``, runs it and compares outputs bitwise and
peaks to the byte (:func:`measure_peak`: allocation events of the CPU allocator, independent
of the model). See ``docs/adapters.md`` (Inductor).

:func:`attribute_estimate` itemises the difference between Inductor's own
``estimate_peak_memory`` (``torch/_inductor/memory.py``, whose buffer timeline the capture
records) and the stock program's peak by cause — graph inputs the caller holds, buffers the
C++ backend keeps inside a kernel, kernel groups, views into a concatenation, in-place and
cross-step buffer reuse (pytorch#192578, #145883), library transients — so that
``estimate + sum(differences) == measured stock peak``. Example::

    cap = capture(model, x)
    for d in attribute_estimate(cap):
        print(d)            # "in-place reuse: -16384 (buf3=buf2, ...)", ..., "unattributed: +0"

torch is imported lazily; install the extra ``memopt[torch]``.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import re
import textwrap
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from memopt.core.program import Program, Statement
from memopt.errors import InternalError, MemoptError, OptionError

__all__ = ["capture", "capture_training", "optimize", "optimize_capture", "measure_peak", "attribute_estimate",
           "Capture", "InductorTimeline", "InductorBuffer", "EstimateDifference", "ESTIMATE_CAUSES",
           "OptimizeReport", "MemoptSchedulerPass", "compile_path_options", "scheduler_program"]


class InductorCaptureError(MemoptError):
    """The compiled function cannot be captured as one straight-line wrapper program."""


def _torch():
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise OptionError("memopt.adapters.inductor needs torch: pip install 'memopt[torch]'") from exc
    return torch


# ----------------------------------------------------------------------------- measurement
def _alloc_events(prof) -> list:
    """CPU allocation events of a finished profiler run, in allocator order, each as
    ``(marker, alloc_size, total_allocated)``; ``marker`` is the innermost enclosing
    ``memopt#<i>`` record-function index (``None`` outside)."""
    from torch._C._profiler import _EventType

    out = []
    stack = [(r, None) for r in prof.profiler.kineto_results.experimental_event_tree()]
    while stack:
        e, tag = stack.pop()
        if e.tag == _EventType.Allocation:
            f = e.extra_fields
            if f.device.type == "cpu":
                out.append((e.start_time_ns, len(out), tag, int(f.alloc_size), int(f.total_allocated)))
        name = e.name
        if name.startswith("memopt#"):
            tag = int(name[7:])
        stack.extend((c, tag) for c in e.children)
    out.sort(key=lambda r: (r[0], r[1]))
    events = [(tag, size, total) for _, _, tag, size, total in out]
    # the allocator's running total orders the events exactly: check the chain
    for (_, _, t0), (_, s1, t1) in zip(events, events[1:]):
        if t0 + s1 != t1:
            raise InternalError("allocation-chain", "profiler allocation events are not a consistent chain "
                                                    f"({t0} + {s1} != {t1}): concurrent allocations?")
    return events


def _profile():
    _torch()
    from torch.profiler import ProfilerActivity, profile

    return profile(activities=[ProfilerActivity.CPU], profile_memory=True)


def measure_peak(fn: Callable[[], Any]) -> tuple[int, Any]:
    """Run ``fn()`` under PyTorch's CPU memory profiler; return ``(peak, result)`` where
    ``peak`` is the highest number of bytes allocated at the CPU allocator during the call,
    above what was allocated when it started (exact: the allocator reports every
    allocation's and free's byte count, and its own running total)."""
    with _profile() as prof:
        result = fn()
    events = _alloc_events(prof)
    if not events:
        return 0, result
    start = events[0][2] - events[0][1]
    return max(0, max(t for _, _, t in events) - start), result


# ----------------------------------------------------------------------------- parsing
@dataclass(frozen=True)
class _Src:
    """The wrapper source split around ``call``'s body."""

    head: str            # everything up to the first body statement (prologue included)
    tail: str            # from the return statement to the end
    indent: str
    prologue: list       # ast statements (args unpacking, args.clear())
    body: list           # ast statements
    texts: list          # source text per body statement (preceding comment lines included)
    args_name: str


def _split(source: str) -> _Src:
    tree = ast.parse(source)
    call = None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "call":
            call = node
            break
    if call is None:
        raise InductorCaptureError("the generated wrapper has no call() function (cpp_wrapper is not supported)")
    params = [a.arg for a in call.args.args]
    args_name = params[-1] if params else "args"
    stmts = list(call.body)
    prologue = []
    while stmts:
        s = stmts[0]
        if isinstance(s, ast.Assign) and isinstance(s.value, ast.Name) and s.value.id == args_name:
            prologue.append(stmts.pop(0))
        elif (isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)
              and ast.unparse(s.value.func) == f"{args_name}.clear"):
            prologue.append(stmts.pop(0))
        else:
            break
    if not stmts or not isinstance(stmts[-1], ast.Return):
        raise InductorCaptureError("call() does not end with a return statement")
    ret = stmts.pop()
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom, ast.Global, ast.Nonlocal)):
                raise InductorCaptureError(f"call() has control flow memopt does not reorder: line {n.lineno}")
    lines = source.splitlines(keepends=True)
    first = stmts[0] if stmts else ret
    indent = lines[first.lineno - 1][: first.col_offset]
    head_end = first.lineno - 1
    # comment lines between the prologue and the first statement belong to that statement
    prev_end = prologue[-1].end_lineno if prologue else call.body[0].lineno - 1
    head_end = min(head_end, prev_end)
    texts = []
    for s in stmts:
        seg = ast.get_source_segment(source, s)
        comments = []
        if s.col_offset == len(indent):  # starts its line: take the comment lines just above
            k = s.lineno - 2
            while k >= prev_end and lines[k].strip().startswith("#"):
                comments.insert(0, lines[k].strip())
                k -= 1
        end_line = lines[s.end_lineno - 1]
        trailing = end_line[s.end_col_offset:].strip() if s.end_col_offset is not None else ""
        text = seg + (("  " + trailing) if trailing.startswith("#") else "")
        texts.append("\n".join(comments + [textwrap.dedent(text) if "\n" not in text else text]))
        prev_end = max(prev_end, s.end_lineno)
    head = "".join(lines[:head_end])
    tail = "".join(lines[ret.lineno - 1:])
    # comments directly above the return stay with it
    return _Src(head, tail, indent, prologue, stmts, texts, args_name)


def _kernel_signatures(source: str) -> dict[str, list[bool]]:
    """``kernel name -> write flag per argument`` for Inductor's C++ kernels
    (``async_compile.cpp_pybinding([arg types], src)``: a non-const pointer is written)."""
    out = {}
    for node in ast.parse(source).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call) and node.value.args
                and isinstance(node.value.args[0], (ast.List, ast.Tuple))):
            func = ast.unparse(node.value.func)
            if func.startswith("async_compile.cpp"):
                try:
                    types = [ast.literal_eval(e) for e in node.value.args[0].elts]
                except ValueError:
                    continue
                out[node.targets[0].id] = [("*" in t and not t.strip().startswith("const")) for t in types]
    return out


def _names(node, local: set[str], ctx) -> list[str]:
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ctx) and n.id in local]


def _written_names(stmt, local: set[str], kernels: dict, namespace: dict) -> set[str] | None:
    """Names whose storage the statement writes, from the callee's signature; ``None`` if
    unknown (then every touched name counts as written)."""
    torch = _torch()
    if isinstance(stmt, ast.Expr):
        call = stmt.value
    elif isinstance(stmt, ast.Assign):
        call = stmt.value
    elif isinstance(stmt, ast.Delete):
        return set()
    else:
        return None
    if not isinstance(call, ast.Call):
        # a plain expression or alias (``buf4 = buf1``, ``x[0]``): reads only
        return set() if not any(isinstance(n, ast.Call) for n in ast.walk(call)) else _pure_views(call, local)
    func = ast.unparse(call.func)
    if func in ("assert_size_stride", "assert_alignment", "reinterpret_tensor", "empty_strided_cpu",
                "empty_strided", "torch.empty_strided", "empty_strided_cpu_pinned"):
        return set()
    if func in kernels:
        flags = kernels[func]
        if len(flags) != len(call.args) or call.keywords:
            return None
        return {n for a, w in zip(call.args, flags) if w for n in _names(a, local, ast.Load)}
    if func.startswith("extern_kernels."):
        return {n for k in call.keywords if k.arg == "out" for n in _names(k.value, local, ast.Load)}
    try:
        target = eval(compile(ast.Expression(call.func), "<callee>", "eval"), namespace)  # noqa: S307
    except Exception:
        return None
    if isinstance(target, torch._ops.OpOverloadPacket):
        return None
    if isinstance(target, torch._ops.OpOverload):
        schema = target._schema
        written = set()
        for i, a in enumerate(schema.arguments):
            if a.alias_info is not None and a.alias_info.is_write:
                if i < len(call.args):
                    written.update(_names(call.args[i], local, ast.Load))
                for k in call.keywords:
                    if k.arg == a.name:
                        written.update(_names(k.value, local, ast.Load))
        return written
    return None


def _pure_views(expr, local: set[str]) -> set[str] | None:
    for n in ast.walk(expr):
        if isinstance(n, ast.Call) and ast.unparse(n.func) != "reinterpret_tensor":
            return None
    return set()


# ----------------------------------------------------------------------------- Inductor's own model
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


# ----------------------------------------------------------------------------- capture
@dataclass
class Capture:
    """An Inductor wrapper captured as a memopt statement program.

    ``program`` is the :class:`~memopt.core.program.Program` (statement ``i`` is body
    statement ``i`` of ``call``; its ``payload`` is the source text); ``source`` the wrapper
    as Inductor generated it; ``args`` the graph inputs ``call`` receives (caller-owned, not
    counted); ``inductor_estimate`` Inductor's own ``estimate_peak_memory`` for the order it
    emitted (``None`` if unreachable, e.g. an FX-graph cache hit) and ``inductor_timeline`` the
    buffer lifetimes behind it (see :func:`attribute_estimate`); ``mismatches`` statements
    whose measured net allocation disagreed with the model (empty when the model is exact).
    """

    program: Program
    source: str
    args: list
    inductor_estimate: int | None
    mismatches: list = field(default_factory=list)
    inductor_timeline: InductorTimeline | None = None
    _src: Any = None

    def source_for(self, order: Sequence[int] | None = None) -> str:
        """The wrapper source with ``call``'s body statements in ``order`` (statement ids)."""
        if order is None:
            order = range(len(self._src.texts))
        order = [int(i) for i in order]
        if sorted(order) != list(range(len(self._src.texts))):
            raise OptionError("an order must list every statement of the program exactly once")
        if order != list(range(len(order))):
            self.program.reorder(order)  # raises ScheduleError unless every dependency is kept
        body = "".join(textwrap.indent(self._src.texts[i], self._src.indent) + "\n" for i in order)
        return self._src.head + body + self._src.tail

    def load(self, order: Sequence[int] | None = None) -> Callable[[list], Any]:
        """Load the (permuted) wrapper with ``PyCodeCache.load`` and return its ``call``."""
        from torch._inductor.codecache import PyCodeCache

        return PyCodeCache.load(self.source_for(order)).call

    def fresh_args(self) -> list:
        """A copy of the captured inputs (storages cloned, aliasing between inputs kept):
        a program may write into its inputs (a backward reuses donated buffers), so every
        run starts from its own copy."""
        return _clone_args(self.args)

    def run(self, order: Sequence[int] | None = None, call: Callable | None = None):
        """Run the (permuted) program on a fresh copy of the captured inputs; returns its outputs."""
        torch = _torch()
        call = call or self.load(order)
        with torch.no_grad():
            return call(self.fresh_args())

    def measure(self, order: Sequence[int] | None = None, call: Callable | None = None) -> tuple[int, Any]:
        """``(measured peak bytes, outputs)`` of one run of the (permuted) program on a fresh
        copy of the inputs, which the caller (this method) holds during the run."""
        torch = _torch()
        call = call or self.load(order)
        with torch.no_grad():
            call(self.fresh_args())  # warm-up: library caches (primitive caches, lazy inits) settle first
            held = self.fresh_args()
            return measure_peak(lambda: call(list(held)))


def _clone_args(args: list) -> list:
    """Copies of ``args`` with cloned storages (aliasing between them kept)."""
    torch = _torch()
    clones: dict = {}
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            st = a.untyped_storage()
            key = (st.data_ptr(), st.nbytes())
            if key not in clones or not st.nbytes():
                clones[key] = st.clone()
            t = torch.empty(0, dtype=a.dtype, device=a.device)
            t.set_(clones[key], a.storage_offset(), a.size(), a.stride())
            out.append(t)
        else:
            out.append(a)
    return out


@contextlib.contextmanager
def _record_inductor_estimate(box: list):
    """Wrap Inductor's peak-memory reordering pass to record, for the order it returns (the
    stock order), ``estimate_peak_memory`` and the buffer timeline behind it
    (``compute_memory_timeline``) as an :class:`InductorTimeline`."""
    import torch._inductor.memory as mem

    orig = mem.reorder_for_peak_memory

    def wrapped(nodes, name_to_buf, name_to_fused_node, graph_inputs, graph_outputs, *a, **k):
        out = orig(nodes, name_to_buf, name_to_fused_node, graph_inputs, graph_outputs, *a, **k)
        try:
            freeable = mem.get_freeable_input_buf(out, graph_inputs)
            estimate = int(mem.estimate_peak_memory(out, freeable, graph_outputs)[0])
            infos, _, _ = mem.compute_memory_timeline(out, freeable, graph_outputs)
            buffers = tuple(InductorBuffer(bi.buffer.get_name(), int(bi.size_alloc), int(bi.size_free),
                                           int(bi.start_step), int(bi.end_step), isinstance(bi.buffer, mem.FreeableInputBuffer))
                            for bi in infos)
            box.append((estimate, InductorTimeline(len(out), buffers)))
        except Exception:  # the estimate is informative only
            box.append((None, None))
        return out

    mem.reorder_for_peak_memory = wrapped
    try:
        yield
    finally:
        mem.reorder_for_peak_memory = orig


@contextlib.contextmanager
def _record_call_args(box: list):
    from torch._inductor.output_code import CompiledFxGraph

    orig = CompiledFxGraph.__call__

    def wrapped(self, inputs):
        box.append(list(inputs))
        return orig(self, inputs)

    CompiledFxGraph.__call__ = wrapped
    try:
        yield
    finally:
        CompiledFxGraph.__call__ = orig


def capture(fn: Callable, *example_inputs, **compile_options) -> Capture:
    """Compile ``fn`` with Inductor on CPU (``torch.compile(fn, backend="inductor",
    options=compile_options)``, no grad) and capture the generated wrapper as a memopt
    statement program with measured transients. Resets dynamo first (``run_and_get_code``
    does) and bypasses the FX-graph cache so that Inductor's own peak estimate is computed.

    Raises :class:`InductorCaptureError` if the function compiles to more than one graph
    (graph breaks) or the wrapper is not a straight-line Python ``call``."""
    torch = _torch()
    from torch._inductor.utils import run_and_get_code

    options = {"fx_graph_cache": False}
    options.update(compile_options)
    estimate: list = []
    compiled = torch.compile(fn, backend="inductor", options=options)
    with torch.no_grad(), _record_inductor_estimate(estimate):
        _, codes = run_and_get_code(compiled, *example_inputs)
    codes = [c for c in codes if "def call(" in c]
    if len(codes) != 1:
        raise InductorCaptureError(f"{getattr(fn, '__name__', type(fn).__name__)} compiled to {len(codes)} "
                                   "wrapper programs (graph breaks?); memopt captures exactly one")
    source = codes[0]
    args_box: list = []
    with torch.no_grad(), _record_call_args(args_box):
        compiled(*example_inputs)
    if len(args_box) != 1:
        raise InductorCaptureError(f"expected one call of the compiled graph, saw {len(args_box)}")
    args = args_box[0]
    program, mismatches = _build_program(source, _clone_args(args), name=getattr(fn, "__name__", type(fn).__name__))
    est, timeline = estimate[-1] if estimate else (None, None)
    return Capture(program=program, source=source, args=args, inductor_estimate=est, mismatches=mismatches,
                   inductor_timeline=timeline, _src=_split(source))


def _aot_kind(code: str) -> str:
    head = code.split("\n", 1)[0]
    return "backward" if "_backward" in head else "forward" if "_forward" in head else "inference"


def capture_training(fn: Callable, *example_inputs, loss: Callable | None = None,
                     **compile_options) -> dict[str, Capture]:
    """Compile a training step (``loss(fn(*example_inputs)).backward()``, default loss: the
    sum of the outputs) with Inductor on CPU and capture AOTAutograd's forward and backward
    wrappers as two programs: ``{"forward": Capture, "backward": Capture}``.

    Each program's inputs are caller-owned, as in :func:`capture`: the backward's saved
    activations are held by the capture (in a real step autograd hands them over and the
    backward's ``del`` frees them; that donation is not modelled)."""
    torch = _torch()
    from torch._inductor.utils import run_and_get_code

    options = {"fx_graph_cache": False}
    options.update(compile_options)
    compiled = torch.compile(fn, backend="inductor", options=options)

    def default_loss(out):
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return sum(o.float().sum() for o in outs)

    loss = loss or default_loss

    def step():
        loss(compiled(*example_inputs)).backward()

    estimate: list = []
    with torch.enable_grad(), _record_inductor_estimate(estimate):
        _, codes = run_and_get_code(step)
    by_kind = {}
    for c in codes:
        if "def call(" in c:
            by_kind.setdefault(_aot_kind(c), []).append(c)
    if len(by_kind.get("forward", [])) != 1 or len(by_kind.get("backward", [])) != 1:
        raise InductorCaptureError(f"a training step compiled to {sum(map(len, by_kind.values()))} wrapper "
                                   "programs; memopt captures exactly one forward and one backward")
    calls: list = []
    with torch.enable_grad(), _record_call_args(calls):
        step()
    if len(calls) != 2:
        raise InductorCaptureError(f"expected a forward and a backward call, saw {len(calls)}")
    out = {}
    for kind, args, (est, timeline) in zip(("forward", "backward"), calls, (estimate + [(None, None)] * 2)[:2]):
        source = by_kind[kind][0]
        program, mismatches = _build_program(source, _clone_args(args), name=f"{getattr(fn, '__name__', type(fn).__name__)}-{kind}")
        out[kind] = Capture(program=program, source=source, args=args, inductor_estimate=est,
                            mismatches=mismatches, inductor_timeline=timeline, _src=_split(source))
    return out


def _storages(value, torch) -> list:
    """``(key, nbytes)`` of every tensor storage a value holds (tensor, tuple/list of them)."""
    if isinstance(value, torch.Tensor):
        st = value.untyped_storage()
        n = int(st.nbytes())
        return [((st.data_ptr(), n) if n else ("empty", id(value)), n)]
    if isinstance(value, (tuple, list)):
        return [x for v in value for x in _storages(v, torch)]
    return []


def _build_program(source: str, args: list, name: str = "") -> tuple[Program, list]:
    torch = _torch()
    from torch._inductor.codecache import PyCodeCache

    src = _split(source)
    mod = PyCodeCache.load(source)
    kernels = _kernel_signatures(source)
    ns = dict(mod.__dict__)
    ns[src.args_name] = list(args)
    local: set[str] = set()
    for s in src.prologue:
        exec(compile(ast.Module([s], []), "<prologue>", "exec"), ns)  # noqa: S102
        local.update(n.id for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
    arg_names = sorted(local)
    for s in src.body:
        local.update(n.id for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)))
    codes = [compile(ast.Module([s], []), f"<memopt stmt {i}>", "exec") for i, s in enumerate(src.body)]

    # storage bookkeeping (runtime)
    sid_of: dict = {}                 # live storage key -> storage id
    size_of: dict[int, int] = {}      # storage id -> bytes (0 for external)
    external: set[int] = set()
    refs: dict[str, list[int]] = {}   # name -> storage ids it holds
    for a in arg_names:
        for key, n in _storages(ns.get(a), torch):
            if key not in sid_of:
                sid_of[key] = len(size_of)
                size_of[sid_of[key]] = n
                external.add(sid_of[key])
        refs[a] = [sid_of[k] for k, _ in _storages(ns.get(a), torch)]

    effects = []  # per statement: dict of sets
    # run once to warm up library caches, then once more under the profiler, statement by statement
    warm = dict(ns)
    warm[src.args_name] = list(args)
    with torch.no_grad():
        for c in codes:
            exec(c, warm)  # noqa: S102
    del warm
    with torch.no_grad(), _profile() as prof:
        for i, (s, c) in enumerate(zip(src.body, codes)):
            loaded = set(_names(s, local, ast.Load))
            stored = [n.id for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
            deleted = [n.id for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Del)]
            # comprehensions only: a tensor held by a local variable of this loop would outlive
            # the statement that deletes its last name, and its free would be recorded later,
            # outside every statement (the "del attributed nowhere" of earlier versions)
            versions = {n: ns[n]._version for n in loaded if isinstance(ns.get(n), torch.Tensor)}
            with torch._C._profiler._RecordFunctionFast(f"memopt#{i}"):
                exec(c, ns)  # noqa: S102
            written = _written_names(s, local, kernels, ns)
            if written is None:
                written = set(loaded)
            written |= {n for n, ver in versions.items() if isinstance(ns.get(n), torch.Tensor) and ns[n]._version != ver}
            effects.append((loaded, stored, deleted, written))
            # new bindings: learn their storages now (before later statements free anything)
            new_storages = []
            for n in stored:
                ids = []
                for key, nbytes in _storages(ns.get(n), torch):
                    if key not in sid_of:
                        sid_of[key] = len(size_of)
                        size_of[sid_of[key]] = nbytes
                        new_storages.append(sid_of[key])
                    ids.append(sid_of[key])
                effects[-1] = effects[-1] + ((n, ids),)
            effects[-1] = (effects[-1], new_storages)
            # forget keys of storages no name refers to any more (their address may be reused)
            alive = {sid for nm in local if nm in ns for k, _ in _storages(ns[nm], torch) for sid in [sid_of.get(k)]}
            for key in [k for k, sid in sid_of.items() if sid not in alive and sid not in external]:
                del sid_of[key]
    events = _alloc_events(prof)

    # measured net allocation and in-statement peak, per statement
    net = [0] * len(codes)
    high = [0] * len(codes)
    for tag, size, _ in events:
        if tag is None:
            continue
        net[tag] += size
        high[tag] = max(high[tag], net[tag])

    # storage lifetimes by name references, in the captured order
    holders: dict[int, set[str]] = {}
    for a in arg_names:
        for sid in refs[a]:
            holders.setdefault(sid, set()).add(a)
    stmts = []
    mismatches = []
    bound: set[str] = set(arg_names)
    for i, ((base_eff, new_storages), text) in enumerate(zip(effects, src.texts)):
        loaded, stored, deleted, written = base_eff[:4]
        bindings = base_eff[4:]
        allocs: list = []
        frees: list = []
        reads: set = set()
        writes: set = set()
        for n in loaded:
            reads.add(f"n:{n}")
            reads.update(f"s:{sid}" for sid in refs.get(n, ()))
        for n in written:
            writes.update(f"s:{sid}" for sid in refs.get(n, ()))
        for sid in new_storages:
            allocs.append((f"s:{sid}", size_of[sid]))
        # rebinding drops the old value's references
        for n, ids in bindings:
            if n in bound:
                writes.add(f"n:{n}")
                for sid in refs.get(n, ()):
                    holders[sid].discard(n)
                    if not holders[sid] and sid not in external:
                        frees.append(f"s:{sid}")
            else:
                allocs.append((f"n:{n}", 0))
                bound.add(n)
            refs[n] = list(ids)
            for sid in ids:
                holders.setdefault(sid, set()).add(n)
                if sid not in new_storages:
                    reads.add(f"s:{sid}")
        for n in deleted:
            if n not in bound:
                raise InductorCaptureError(f"statement {i} deletes {n!r}, which is not bound")
            frees.append(f"n:{n}")
            bound.discard(n)
            for sid in refs.pop(n, ()):
                holders[sid].discard(n)
                if not holders[sid] and sid not in external:
                    frees.append(f"s:{sid}")
                else:
                    reads.add(f"s:{sid}")
        frees = list(dict.fromkeys(frees))
        freed_storage = set(b for b in frees if b.startswith("s:"))
        reads -= freed_storage
        reads -= {b for b, _ in allocs}
        writes -= {b for b, _ in allocs} | freed_storage
        reads -= writes
        delta = sum(z for _, z in allocs) - sum(size_of[int(b[2:])] for b in freed_storage)
        if net[i] != delta:
            mismatches.append((i, text, delta, net[i]))
        # memory while the statement runs = before + delta + transient = before + high
        transient = max(0, high[i] - delta) if high[i] > 0 else 0
        stmts.append(Statement(f"s{i}", allocs=tuple(allocs), frees=tuple(frees), reads=tuple(sorted(reads)),
                               writes=tuple(sorted(writes)), transient=int(transient), payload=text))
    program = Program(stmts, inputs={f"n:{a}": 0 for a in arg_names}, name=name)
    return program, mismatches


# ----------------------------------------------------------------------------- optimize
@dataclass
class OptimizeReport:
    """What :func:`optimize` found (bytes; ``measured_*`` from the allocator, see
    :func:`measure_peak`)."""

    inductor_estimate: int | None
    modelled_peak_stock: int
    modelled_peak: int
    lower_bound: int
    status: str
    measured_peak_stock: int
    measured_peak: int
    bitwise_equal: bool
    order: list
    seconds: float
    capture: Capture
    stock_peak_without_transients: int = 0  # the stock program's modelled peak with every transient set to 0
    estimate_differences: list = field(default_factory=list)  # attribute_estimate(capture): estimate -> stock peak
    call: Callable = None  # runs the optimized program: call(args list) -> outputs
    source: str = ""

    def __call__(self, *inputs):
        """Run the optimized program on ``inputs`` in the captured argument order (default:
        the captured inputs)."""
        return self.call(list(inputs) if inputs else list(self.capture.args))

    def row(self) -> dict:
        keys = ("inductor_estimate", "stock_peak_without_transients", "modelled_peak_stock", "modelled_peak", "lower_bound", "status",
                "measured_peak_stock", "measured_peak", "bitwise_equal", "seconds")
        return {k: getattr(self, k) for k in keys}


def _bitwise_equal(a, b, torch) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype or a.stride() != b.stride():
            return False
        def raw(t):
            return t.detach().contiguous().reshape(-1).view(torch.uint8)
        return bool(torch.equal(raw(a), raw(b)))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_bitwise_equal(x, y, torch) for x, y in zip(a, b))
    return a == b


def optimize(fn: Callable, *example_inputs, time_limit: float = 10.0, method: str = "auto",
             capture_result: Capture | None = None, **compile_options) -> OptimizeReport:
    """Capture ``fn``'s Inductor program, reorder its statements with :func:`memopt.schedule`,
    load and run the permuted wrapper; compare outputs bitwise and peaks (modelled and
    measured) with the stock order. The returned order is never modelled above stock."""
    cap = capture_result or capture(fn, *example_inputs, **compile_options)
    return optimize_capture(cap, time_limit=time_limit, method=method)


def optimize_capture(cap: Capture, *, time_limit: float = 10.0, method: str = "auto") -> OptimizeReport:
    """:func:`optimize` on an existing :class:`Capture` (e.g. one graph of
    :func:`capture_training`)."""
    import time

    import memopt

    torch = _torch()
    program = cap.program
    stock = program.peak()
    t0 = time.perf_counter()
    res = memopt.schedule(program, method=method, time_limit=time_limit)
    seconds = time.perf_counter() - t0
    order = [int(i) for i in res.order]
    peak = int(res.peak)
    if peak > stock:  # never worse than what Inductor emitted
        order, peak = list(range(len(program.statements))), stock
    if program.peak(order) != peak:
        raise InternalError("program-peak", f"schedule claimed {peak}, the program evaluates to {program.peak(order)}")
    stock_call = cap.load()
    opt_call = cap.load(order)
    with torch.no_grad():
        measured_stock, out_stock = cap.measure(call=stock_call)
        measured, out = cap.measure(call=opt_call)
    return OptimizeReport(
        inductor_estimate=cap.inductor_estimate, modelled_peak_stock=int(stock), modelled_peak=int(peak),
        lower_bound=int(min(res.lower_bound, peak)), status=res.status if peak == res.peak else "feasible",
        measured_peak_stock=int(measured_stock), measured_peak=int(measured),
        bitwise_equal=_bitwise_equal(out_stock, out, torch), order=order, seconds=seconds, capture=cap,
        call=_inference(opt_call), source=cap.source_for(order),
        stock_peak_without_transients=without_transients(program).peak(),
        estimate_differences=attribute_estimate(cap))


def _inference(call: Callable) -> Callable:
    """``call`` run under ``torch.no_grad()`` (the captured program is an inference graph)."""
    torch = _torch()

    def run(args: list):
        with torch.no_grad():
            return call(args)

    return run


def without_transients(program: Program) -> Program:
    """The same program with every statement's transient set to 0 (what a model that
    ignores library workspaces, like Inductor's estimate, sees)."""
    return Program([dataclasses.replace(s, transient=0) for s in program.statements], program.inputs, program.name)


# ----------------------------------------------------------------------------- torch.compile path
def _scheduler_pass_base():
    from torch._inductor.custom_graph_pass import CustomSchedulerPass

    return CustomSchedulerPass


def scheduler_program(nodes: list) -> Program:
    """Inductor's scheduler nodes (after fusion) as a memopt statement program, with the sizes
    and lifetimes of Inductor's own memory planning (``torch._inductor.memory``): node ``i``
    is statement ``i`` and allocates its output buffers (``size_alloc``), reads the buffers it
    depends on, and is ordered after every node it depends on (including ordering-only weak
    dependencies); each buffer that dies (not a graph output) gets a ``free`` statement with
    ``size_free`` that follows its last reader. Freeable graph inputs are live at the start.
    This is Inductor's model, not the generated program: transients, the wrapper's buffer
    reuse and caller-held inputs are not in it (the wrapper path models those exactly)."""
    from torch._inductor import memory as mem
    from torch._inductor.virtualized import V

    sched = V.graph.scheduler
    graph_inputs = set(V.graph.graph_inputs.keys())
    graph_outputs = set(V.graph.get_output_names())
    freeable = mem.get_freeable_input_buf(nodes, graph_inputs)
    mem.assign_memory_planning_info_for_scheduler_buffers(nodes, sched.name_to_buf)
    mem.assign_memory_planning_info_for_scheduler_nodes(nodes, sched.name_to_fused_node, sched.name_to_buf, freeable)
    index = {n: i for i, n in enumerate(nodes)}
    stmts: list[Statement] = []
    last_reader: dict[str, int] = {}
    sizes: dict[str, int] = {}
    producer: dict[str, int] = {}
    per_node = []
    for i, node in enumerate(nodes):
        allocs = []
        for b in node.get_outputs():
            name = f"b:{b.get_name()}"
            sizes[name] = int(b.mpi_buffer.size_free)
            producer[name] = i
            allocs.append((name, int(b.mpi_buffer.size_alloc)))
        reads = [f"b:{b.get_name()}" for b in node.mpi_node.pred_buffers]
        reads += [f"o:{index[p]}" for p in node.mpi_node.pred_nodes if p in index]
        allocs.append((f"o:{i}", 0))
        per_node.append((allocs, reads))
        for r in reads:
            last_reader[r] = i
    # free statements: buffer sizes freed must equal what was allocated (memopt's model); a
    # buffer whose free size differs (multi-output packing) is charged its free size at
    # allocation, which is what it releases
    inputs = {f"b:{name}": int(buf.mpi_buffer.size_free) for name, buf in freeable.items()}
    dying: dict[int, list[str]] = {}
    for name in list(sizes) + list(inputs):
        if name[2:] in graph_outputs:
            continue
        # a buffer nobody reads dies right after its producer
        dying.setdefault(max(last_reader.get(name, -1), producer.get(name, -1)), []).append(name)
    for f in dying.get(-1, []):
        if f in inputs:
            stmts.append(Statement(f"free {f[2:]}", frees=(f,)))
    for i, (allocs, reads) in enumerate(per_node):
        allocs = [(b, max(z, sizes.get(b, z))) for b, z in allocs]
        stmts.append(Statement(f"node{i}", allocs=tuple(allocs), reads=tuple(reads), writes=tuple(b for b, _ in allocs)))
        for f in dying.get(i, []):
            stmts.append(Statement(f"free {f[2:]}", frees=(f,)))
    return Program(stmts, inputs=inputs, name="inductor-scheduler")


class MemoptSchedulerPass:
    """A ``CustomSchedulerPass`` for ``torch._inductor.config._post_fusion_custom_pass`` that
    reorders Inductor's fused scheduler nodes with :func:`memopt.schedule` on
    :func:`scheduler_program`. Use with ``reorder_for_peak_memory=False`` (otherwise Inductor
    re-scores the order and may replace it). ``uuid()`` keys the FX-graph cache on the pass
    and its settings, so the cache keeps working. ``last`` holds the last schedule's
    ``(stock modelled peak, memopt modelled peak, lower bound, status)`` in Inductor's model."""

    def __new__(cls, *args, **kwargs):
        base = _scheduler_pass_base()
        if not issubclass(cls, base):  # bind the abstract base lazily (torch is optional)
            cls = type(cls.__name__, (cls, base), {})
        return object.__new__(cls)

    def __init__(self, time_limit: float = 1.0, method: str = "auto"):
        self.time_limit = float(time_limit)
        self.method = method
        self.last = None

    def uuid(self):
        return f"memopt-scheduler-pass:{self.method}:{self.time_limit!r}:v1"

    def __call__(self, nodes: list) -> list:
        import memopt

        program = scheduler_program(nodes)
        stock = program.peak()
        res = memopt.schedule(program, method=self.method, time_limit=self.time_limit)
        if res.peak > stock:
            return nodes
        node_ids = [int(s.name[4:]) for s in (program.statements[i] for i in res.order) if s.name.startswith("node")]
        self.last = (int(stock), int(res.peak), int(res.lower_bound), res.status)
        return [nodes[i] for i in node_ids]


def compile_path_options(time_limit: float = 1.0) -> dict:
    """Compile options for the ``torch.compile`` path: memopt's scheduler pass, Inductor's own
    peak-memory reordering off. Pass them to ``torch.compile(options=...)`` or to
    :func:`capture` to measure the resulting program exactly."""
    return {"_post_fusion_custom_pass": MemoptSchedulerPass(time_limit), "reorder_for_peak_memory": False}
