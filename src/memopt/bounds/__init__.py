"""memopt.bounds: lower bounds on the peak (trap bounds by minimum cuts), certificates and their checker."""

from memopt.bounds.certificate import certify, load_certificate, make_certificate, save_certificate
from memopt.bounds.checker import VerifyReport, verify_certificate
from memopt.bounds.verify import VerifyOutcome, verify_document
from memopt.bounds.trap import (
    Bound,
    best_bound,
    forward_trap_bound,
    node_trap_values,
    pair_trap_bound,
    probing_trap_bound,
    reverse_trap_bound,
    simple_bounds,
    simple_dag_bounds,
)

__all__ = [
    "Bound", "forward_trap_bound", "reverse_trap_bound", "pair_trap_bound", "probing_trap_bound", "node_trap_values",
    "simple_bounds", "simple_dag_bounds", "best_bound", "make_certificate", "certify", "save_certificate", "load_certificate", "verify_certificate", "VerifyReport", "verify_document", "VerifyOutcome",
]
