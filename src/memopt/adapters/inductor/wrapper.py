"""Parsing Inductor's generated Python wrapper: ``call``'s body as statements, and what each
statement writes (from the callee's signature)."""

from __future__ import annotations

import ast
import functools
import re
import textwrap
from dataclasses import dataclass

from memopt.errors import MemoptError
from memopt._optional import import_torch


class InductorCaptureError(MemoptError):
    """The compiled function cannot be captured as one straight-line wrapper program."""


def _torch():
    return import_torch("memopt.adapters.inductor")


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
    returns: object = None  # the return statement's value (ast expression; None: a bare return)


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n|$)")


def _source_lines(source: str) -> list[str]:
    """``source``'s lines with their ends, split as the parser counts lines (``\\n``,
    ``\\r\\n``, ``\\r`` only; ``str.splitlines`` also splits at form feeds and others)."""
    out, pos = [], 0
    while pos < len(source):
        m = _LINE.match(source, pos)
        out.append(m.group())
        pos = m.end()
    return out


def _segment(lines: list[str], node) -> str:
    """``ast.get_source_segment`` on lines split once (it splits the whole source per call,
    which is quadratic on a wrapper that embeds every kernel's C++ source). Offsets are UTF-8
    byte offsets, as the parser gives them."""
    first, last = node.lineno - 1, node.end_lineno - 1
    if first == last:
        return lines[first].encode()[node.col_offset:node.end_col_offset].decode()
    return (lines[first].encode()[node.col_offset:].decode() + "".join(lines[first + 1:last])
            + lines[last].encode()[:node.end_col_offset].decode())


@functools.lru_cache(maxsize=4)
def _split(source: str) -> _Src:
    """The wrapper ``source`` split around ``call``'s body (cached: a capture splits its
    source more than once; the result is never mutated)."""
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
    lines = _source_lines(source)
    first = stmts[0] if stmts else ret
    indent = lines[first.lineno - 1][: first.col_offset]
    head_end = first.lineno - 1
    # comment lines between the prologue and the first statement belong to that statement
    prev_end = prologue[-1].end_lineno if prologue else call.body[0].lineno - 1
    head_end = min(head_end, prev_end)
    texts = []
    for s in stmts:
        seg = _segment(lines, s)
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
    return _Src(head, tail, indent, prologue, stmts, texts, args_name, ret.value)


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

