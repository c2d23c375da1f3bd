"""The ``torch.compile`` path: memopt as Inductor's post-fusion scheduler pass.

This module imports torch (the pass subclasses Inductor's ``CustomSchedulerPass``);
:mod:`memopt.adapters.inductor` loads it on first use of its names."""

from __future__ import annotations

from typing import NamedTuple

from torch._inductor.custom_graph_pass import CustomSchedulerPass
from torch.utils._ordered_set import OrderedSet

from memopt.core.program import Program, Statement


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


class PassDecision(NamedTuple):
    """What :class:`MemoptSchedulerPass` decided on one graph, in Inductor's model (bytes).

    ``stock``: the peak of the order Inductor itself would emit (its
    ``reorder_for_peak_memory`` on the same nodes); ``peak``: that of the order the pass
    returned; ``memopt``, ``lower_bound``, ``status``: :func:`memopt.schedule`'s order on
    :func:`scheduler_program`; ``adopted``: whether that order was returned (else Inductor's);
    ``nodes_above_stock``: how many nodes run with more live memory in memopt's order than in
    Inductor's (an order is adopted only when there are none, see :class:`MemoptSchedulerPass`)."""

    stock: int
    peak: int
    memopt: int
    lower_bound: int
    status: str
    adopted: bool
    nodes_above_stock: int


def _inductor_order(nodes: list) -> list:
    """The order Inductor's own peak-memory pass returns for ``nodes``: what a stock compile
    emits (the function itself, unwrapped if a capture is recording its calls)."""
    import inspect

    from torch._inductor import memory as mem
    from torch._inductor.virtualized import V

    sched = V.graph.scheduler
    reorder = inspect.unwrap(mem.reorder_for_peak_memory)
    return reorder(nodes, sched.name_to_buf, sched.name_to_fused_node, OrderedSet(V.graph.graph_inputs.keys()),
                   OrderedSet(V.graph.get_output_names()))


def _memory_at_nodes(order: list) -> tuple[int, dict]:
    """``(peak, {node: bytes live while it runs})`` of ``order`` in Inductor's model
    (``estimate_peak_memory``: its outputs allocated, the buffers it frees not yet freed)."""
    from torch._inductor import memory as mem
    from torch._inductor.virtualized import V

    freeable = mem.get_freeable_input_buf(order, OrderedSet(V.graph.graph_inputs.keys()))
    peak, at_step = mem.estimate_peak_memory(order, freeable, OrderedSet(V.graph.get_output_names()))
    return int(peak), {node: int(at_step[i]) for i, node in enumerate(order)}


class MemoptSchedulerPass(CustomSchedulerPass):
    """A ``CustomSchedulerPass`` for ``torch._inductor.config._post_fusion_custom_pass`` that
    reorders Inductor's fused scheduler nodes with :func:`memopt.schedule` on
    :func:`scheduler_program`, or returns the order Inductor itself would emit.

    Use with ``reorder_for_peak_memory=False``: the pass runs Inductor's peak-memory pass
    itself, to know the stock order. memopt's order is returned only if it is lower than
    Inductor's in Inductor's model *and* no node runs with more live memory in it than in
    Inductor's order. What the model leaves out is mostly per node (a library call's workspace,
    a C++ kernel's local buffers: the same whatever the order), so a lower peak at one node
    bought with more live memory at another, whose transient the model does not see, can
    measure above stock (inception_v3: +4.7 %); with no node above stock, such a transient
    cannot make memopt's order the higher one. Otherwise the pass returns Inductor's order and
    the program is the stock one. The wrapper's buffer reuse, planned after the pass for each
    order, is not in the model: the adopted order is measured, not proved, never above stock.

    The pass pickles as its options only and :meth:`uuid` is a function of them (and of
    memopt's version), so Inductor's FX-graph cache key is stable: a second compile of the
    same graph with equal options is a cache hit (the pass does not run then).

    Parameters
    ----------
    time_limit : float
        Seconds :func:`memopt.schedule` may take per graph.
    method : str
        The :func:`memopt.schedule` method.

    Attributes
    ----------
    last : PassDecision or None
        The last graph's decision, in Inductor's model; ``None`` until the pass has run in this
        process (a cache hit leaves it unchanged). Not part of the pickled state.

    Examples
    --------
    >>> p = MemoptSchedulerPass(time_limit=2)           # doctest: +SKIP
    >>> torch.compile(f, options={"_post_fusion_custom_pass": p,
    ...                           "reorder_for_peak_memory": False})  # doctest: +SKIP
    """

    def __init__(self, time_limit: float = 1.0, method: str = "auto"):
        self.time_limit = float(time_limit)
        self.method = str(method)
        self.last = None

    def __reduce__(self):
        # the options only: ``last`` changes as the pass runs and must not change the cache key
        return (type(self), (self.time_limit, self.method))

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and (other.time_limit, other.method) == (self.time_limit, self.method)

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.time_limit, self.method))

    def __repr__(self) -> str:
        return f"MemoptSchedulerPass(time_limit={self.time_limit!r}, method={self.method!r})"

    def uuid(self) -> str:
        """The FX-graph cache's key for this pass: memopt's version, the adoption rule and the
        options (a graph cached under an earlier rule is not served)."""
        import memopt

        return f"memopt-scheduler-pass:{memopt.__version__}:per-node:{self.method}:{self.time_limit!r}"

    def __call__(self, nodes: list) -> list:
        import memopt

        program = scheduler_program(nodes)
        res = memopt.schedule(program, method=self.method, time_limit=self.time_limit)
        ours = [nodes[int(s.name[4:])] for s in (program.statements[i] for i in res.order) if s.name.startswith("node")]
        stock_order = _inductor_order(nodes)
        stock_peak, stock_at = _memory_at_nodes(stock_order)
        peak, at = _memory_at_nodes(ours)
        above = sum(at[n] > stock_at[n] for n in nodes)
        adopted = peak < stock_peak and above == 0
        self.last = PassDecision(stock_peak, peak if adopted else stock_peak, int(res.peak), int(res.lower_bound),
                                 res.status, adopted, above)
        return ours if adopted else stock_order


def compile_path_options(time_limit: float = 1.0) -> dict:
    """Compile options for the ``torch.compile`` path: memopt's scheduler pass, Inductor's own
    peak-memory reordering off. Pass them to ``torch.compile(options=...)`` or to
    :func:`capture` to measure the resulting program exactly."""
    return {"_post_fusion_custom_pass": MemoptSchedulerPass(time_limit), "reorder_for_peak_memory": False}
