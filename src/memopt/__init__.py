"""memopt: exact memory scheduling and recomputation for ML computation graphs.

>>> import memopt
>>> g = memopt.load_graph("instances/diamond.json")      # doctest: +SKIP
>>> result = memopt.schedule(g, time_limit=10)           # doctest: +SKIP
>>> result.peak, result.lower_bound, result.status       # doctest: +SKIP

Every public name is imported on first use (PEP 562), so that ``import memopt`` (and the
``memopt`` command's ``--help``) imports neither numpy nor numba nor any solver.
"""

__version__ = "0.1.0"

__all__ = [
    "Op", "Tensor", "TensorGraph", "Program", "Statement", "SignedDAG", "peak", "memory_profile",
    "load_graph", "load_instance", "schedule", "ScheduleResult", "compute_bounds",
    "MemoptError", "GraphError", "ScheduleError", "FormatError", "CertificateError",
]

#: public name -> module it lives in (``None``: the name is the submodule itself)
_LAZY = {
    "Op": "memopt.core", "Tensor": "memopt.core", "TensorGraph": "memopt.core",
    "Program": "memopt.core", "Statement": "memopt.core", "SignedDAG": "memopt.core",
    "peak": "memopt.core", "memory_profile": "memopt.core",
    "load_graph": "memopt.io", "load_instance": "memopt.io",
    "schedule": None,  # the callable package: memopt.schedule(graph, method="auto", time_limit=...)
    "remat": None,  # the callable package: memopt.remat(graph, memory_limit=..., cap=1, time_limit=...)
    "ScheduleResult": "memopt.schedule", "compute_bounds": "memopt.schedule",
    "MemoptError": "memopt.errors", "GraphError": "memopt.errors", "ScheduleError": "memopt.errors",
    "FormatError": "memopt.errors", "CertificateError": "memopt.errors",
}


def __getattr__(name):
    if name in _LAZY:
        from importlib import import_module

        module = _LAZY[name]
        value = import_module("memopt." + name) if module is None else getattr(import_module(module), name)
        globals()[name] = value  # later lookups are plain attribute reads
        return value
    raise AttributeError(f"module 'memopt' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
