"""memopt: exact memory scheduling and recomputation for ML computation graphs.

>>> import memopt
>>> g = memopt.load_graph("instances/diamond.json")      # doctest: +SKIP
>>> result = memopt.schedule(g, time_limit=10)           # doctest: +SKIP
>>> result.peak, result.lower_bound, result.status       # doctest: +SKIP
"""

__version__ = "0.1.0"

from memopt.core import Op, Program, SignedDAG, Statement, Tensor, TensorGraph, memory_profile, peak
from memopt.errors import CertificateError, FormatError, GraphError, MemoptError, ScheduleError
from memopt.io import load_graph, load_instance
from memopt import schedule  # callable: memopt.schedule(graph, method="auto", time_limit=...)
from memopt.schedule import ScheduleResult, compute_bounds

__all__ = [
    "Op", "Tensor", "TensorGraph", "Program", "Statement", "SignedDAG", "peak", "memory_profile",
    "load_graph", "load_instance", "schedule", "ScheduleResult", "compute_bounds",
    "MemoptError", "GraphError", "ScheduleError", "FormatError", "CertificateError",
]
