"""Checks a type stub _minigpt_core.pyi against the module it describes: the same public
functions, classes, methods and properties, each callable with the same parameter names. Used
by test_stubs.py (the in-tree build) and test_package.py (an installed package); it imports
nothing of the tests' conftest, so a venv's python can run it.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path


def stub_names(stub: Path) -> dict[str, dict[str, list[str] | None]]:
    """{top-level name: {member: parameter names (None for a non-callable)}}; a top-level
    function is recorded as {"": its parameter names}."""
    tree = ast.parse(stub.read_text())

    def params(fn: ast.FunctionDef) -> list[str]:
        a = fn.args
        return [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs if p.arg not in ("self", "cls")]

    out: dict[str, dict[str, list[str] | None]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            out.setdefault(node.name, {})[""] = params(node)  # overloads repeat the same name
        elif isinstance(node, ast.ClassDef):
            members: dict[str, list[str] | None] = {}
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    is_property = any(isinstance(d, ast.Name) and d.id == "property" for d in item.decorator_list)
                    members[item.name] = None if is_property else params(item)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    members[item.target.id] = None
                elif isinstance(item, ast.Assign):
                    members.update({t.id: None for t in item.targets if isinstance(t, ast.Name)})
            out[node.name] = members
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = {}
        elif isinstance(node, ast.Assign):
            out.update({t.id: {} for t in node.targets if isinstance(t, ast.Name)})
    return out


def signature_params(fn) -> list[str]:
    """Parameter names from a nanobind function's signature, e.g. 'def softmax(x: ..., kernel:
    str = \\'\\', device: str = \\'cpu\\') -> ...' (first overload)."""
    sig = fn.__nb_signature__[0][0]
    inside = sig[sig.index("(") + 1:]
    depth, names, current = 0, [], ""
    for ch in inside:  # split the top-level parameter list on commas
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                break
            depth -= 1
        if ch == "," and depth == 0:
            names.append(current)
            current = ""
        else:
            current += ch
    names.append(current)
    out = []
    for n in names:
        m = re.match(r"\s*\*{0,2}([A-Za-z_]\w*)", n)
        if m and m.group(1) not in ("self", "cls"):
            out.append(m.group(1))
    return out


def public(names) -> set[str]:
    return {n for n in names if not n.startswith("_")}


def check_stub(module) -> None:
    stub = Path(module.__file__).with_name("_minigpt_core.pyi")
    assert stub.is_file(), f"no type stub beside {module.__file__} (the build of _minigpt_core writes it, python/CMakeLists.txt)"
    names = stub_names(stub)
    assert public(dir(module)) == public(names), (
        f"stub {stub} and module differ: only in the module {public(dir(module)) - public(names)}, "
        f"only in the stub {public(names) - public(dir(module))}")
    for name in public(dir(module)):
        obj = getattr(module, name)
        if isinstance(obj, type):
            members = {m for m in public(vars(obj)) if not m.startswith("__")}
            assert members == public(names[name]), f"{name}: stub members {sorted(public(names[name]))} != {sorted(members)}"
            for m in members:
                attr = vars(obj)[m]
                fn = getattr(attr, "__func__", attr)  # staticmethod
                if hasattr(fn, "__nb_signature__"):
                    assert names[name][m] == signature_params(fn), f"{name}.{m}: parameters differ"
        elif hasattr(obj, "__nb_signature__"):
            assert names[name].get("") == signature_params(obj), f"{name}: parameters differ"
