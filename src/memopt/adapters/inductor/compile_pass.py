"""The ``torch.compile`` path: memopt as Inductor's post-fusion scheduler pass.

This module imports torch (the pass subclasses Inductor's ``CustomSchedulerPass``);
:mod:`memopt.adapters.inductor` loads it on first use of its names."""

from __future__ import annotations

from torch._inductor.custom_graph_pass import CustomSchedulerPass

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


class MemoptSchedulerPass(CustomSchedulerPass):
    """A ``CustomSchedulerPass`` for ``torch._inductor.config._post_fusion_custom_pass`` that
    reorders Inductor's fused scheduler nodes with :func:`memopt.schedule` on
    :func:`scheduler_program`.

    Use with ``reorder_for_peak_memory=False`` (otherwise Inductor re-scores the order and may
    replace it). The pass pickles as its options only and :meth:`uuid` is a function of them
    (and of memopt's version), so Inductor's FX-graph cache key is stable: a second compile
    of the same graph with equal options is a cache hit (the pass does not run then).

    Parameters
    ----------
    time_limit : float
        Seconds :func:`memopt.schedule` may take per graph.
    method : str
        The :func:`memopt.schedule` method.

    Attributes
    ----------
    last : tuple or None
        The last schedule's ``(stock modelled peak, memopt modelled peak, lower bound,
        status)`` in Inductor's model; ``None`` until the pass has run in this process (a cache
        hit leaves it unchanged). Not part of the pickled state.

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
        """The FX-graph cache's key for this pass: memopt's version and the options."""
        import memopt

        return f"memopt-scheduler-pass:{memopt.__version__}:{self.method}:{self.time_limit!r}"

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
