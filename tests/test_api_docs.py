"""The API reference (issue 24, item 7): numpydoc sections on every public function, and
``docs/api`` builds with Sphinx, warnings as errors, without network."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys

import pytest
from numpydoc.docscrape import ClassDoc, FunctionDoc

import memopt
import memopt.cache as cache
import memopt.dtr as dtr
from memopt.remat import check_plan, evaluate_plan, plan_from_order, plan_from_runs

from conftest import REPO

#: the functions the docs present as API, each with Parameters, Returns, Raises, Examples
PUBLIC_FUNCTIONS = {
    "memopt.schedule": memopt.schedule, "memopt.remat": memopt.remat,
    "memopt.compute_bounds": memopt.compute_bounds, "memopt.from_networkx": memopt.from_networkx,
    "memopt.load_graph": memopt.load_graph, "memopt.load_instance": memopt.load_instance,
    "memopt.peak": memopt.peak, "memopt.memory_profile": memopt.memory_profile,
    "memopt.remat.check_plan": check_plan, "memopt.remat.plan_from_runs": plan_from_runs,
    "memopt.remat.plan_from_order": plan_from_order, "memopt.remat.evaluate_plan": evaluate_plan,
    "memopt.TensorGraph.build": memopt.TensorGraph.build,
    **{f"memopt.dtr.{n}": getattr(dtr, n) for n in ("load_trace", "baseline", "replay", "replay_ratio")},
    **{f"memopt.cache.{n}": getattr(cache, n) for n in (
        "load_routes", "simulate", "offline_optimum", "flow_lower_bound", "certify_residency",
        "verify_residency_certificate", "simulate_kv", "kv_optimum")},
}
#: the result and model classes, each with its Attributes (or constructor Parameters) and Examples
CLASSES = {f"memopt.{n}": getattr(memopt, n) for n in (
    "ScheduleResult", "RematResult", "ParetoResult", "Tensor", "Op", "TensorGraph", "Statement", "Program",
    "SignedDAG")}


def _documented_names(doc) -> set[str]:
    names = set()
    for p in doc["Parameters"]:
        names.update(n.strip().lstrip("*") for n in p.name.split(","))
    return names


@pytest.mark.parametrize("name", sorted(PUBLIC_FUNCTIONS))
def test_every_public_function_has_the_numpydoc_sections(name):
    fn = PUBLIC_FUNCTIONS[name]
    doc = FunctionDoc(fn)
    for section in ("Returns", "Raises", "Examples"):
        assert doc[section], f"{name}: no {section} section"
    assert ">>> " in "\n".join(doc["Examples"]), f"{name}: the examples are no doctest"
    params = set(inspect.signature(fn).parameters)
    assert params == _documented_names(doc), f"{name}: documented parameters differ from the signature"


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_result_and_model_classes_document_their_fields_with_an_example(name):
    doc = ClassDoc(CLASSES[name], config={"show_class_members": False})
    assert doc["Attributes"] or doc["Parameters"], name
    assert ">>> " in "\n".join(doc["Examples"]), name


def test_every_public_function_and_class_is_in_the_reference():
    text = "\n".join(p.read_text() for p in (REPO / "docs" / "api").glob("*.rst"))
    listed = set(re.findall(r"^\.\. auto(?:function|class):: (\S+)", text, re.M))
    members = {f"memopt.TensorGraph.{m}" for m in ("build", "from_arrays", "topological_order", "to_networkx")}
    assert set(PUBLIC_FUNCTIONS) | set(CLASSES) <= listed | members


@pytest.mark.slow
def test_the_api_reference_builds_with_warnings_as_errors(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           str(REPO / "docs" / "api"), str(tmp_path / "html")],
                          capture_output=True, text=True, timeout=600, cwd=str(REPO))
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = (tmp_path / "html" / "toplevel.html").read_text()
    # the plain function's real signature and its numpydoc sections are on the page
    assert "memopt.schedule" in page and "input_order" in page and "Parameters" in page and "Raises" in page
