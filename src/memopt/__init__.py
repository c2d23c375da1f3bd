"""memopt: exact memory scheduling and recomputation for ML computation graphs.

>>> import memopt
>>> g = memopt.load_graph("instances/diamond.json")      # doctest: +SKIP
>>> result = memopt.schedule(g, time_limit=10)           # doctest: +SKIP
>>> result.peak, result.lower_bound, result.status       # doctest: +SKIP
"""

__version__ = "0.1.0"

from memopt.core import Op, Program, SignedDAG, Statement, Tensor, TensorGraph, memory_profile, peak
from memopt.errors import CertificateError, FormatError, GraphError, MemoptError, ScheduleError

__all__ = [
    "Op", "Tensor", "TensorGraph", "Program", "Statement", "SignedDAG", "peak", "memory_profile",
    "MemoptError", "GraphError", "ScheduleError", "FormatError", "CertificateError",
]
