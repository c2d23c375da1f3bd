"""memopt.io: versioned JSON formats for graphs, programs and plans; published-graph importers."""

from memopt.io.checkmate import load_checkmate
from memopt.io.formats import (
    graph_from_doc,
    graph_to_doc,
    instance_from_doc,
    load_graph,
    load_instance,
    load_plan,
    plan_order,
    plan_to_doc,
    program_from_doc,
    program_to_doc,
    save_graph,
)
from memopt.io.instance import Instance

__all__ = ["Instance", "load_instance", "load_graph", "load_checkmate", "save_graph", "graph_to_doc",
           "graph_from_doc", "program_to_doc", "program_from_doc", "instance_from_doc",
           "plan_to_doc", "plan_order", "load_plan"]
