"""memopt.core: the models (tensor graph, statement program, signed DAG) and the one peak evaluator.

Imports nothing of memopt outside ``core`` and no solver or adapter.
"""

from memopt.core.evaluate import MemoryProfile, memory_profile, order_indices, peak, validate_order
from memopt.core.program import Program, Statement, program_from_graph
from memopt.core.signed_dag import (
    GraphDAG,
    SignedDAG,
    complete_order,
    dag_order_from_op_order,
    dag_peak,
    dag_profile,
    graph_to_dag,
    op_order_from_dag_order,
    validate_node_order,
)
from memopt.core.tensor_graph import Op, Tensor, TensorGraph
from memopt.core.instance import Instance
from memopt.core.problem import SchedulingProblem
from memopt.core.nxgraph import from_networkx

__all__ = [
    "Op", "Tensor", "TensorGraph", "Program", "Statement", "program_from_graph",
    "SignedDAG", "GraphDAG", "graph_to_dag", "complete_order", "dag_peak", "dag_profile",
    "dag_order_from_op_order", "op_order_from_dag_order", "validate_node_order",
    "MemoryProfile", "memory_profile", "peak", "validate_order", "order_indices", "Instance", "SchedulingProblem",
    "from_networkx",
]
