"""docs/testing.md stays the map of the tests (issue 69): every test module is in it, every test outside the
default tier is named in its tier's table, and every test left out of CI says why in its mark. Read with `ast`,
so this costs well under a second."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIER_MARKS = {"slow", "library", "reliability", "launch"}


def mark_names(node) -> list[tuple[str, ast.AST]]:
    """(name, node) of each `pytest.mark.NAME` or `pytest.mark.NAME(...)` inside node."""
    found, called = [], {id(sub.func) for sub in ast.walk(node) if isinstance(sub, ast.Call)}
    for sub in ast.walk(node):
        if id(sub) in called:  # the `pytest.mark.NAME` of a call: counted once, as the call
            continue
        target = sub.func if isinstance(sub, ast.Call) else sub
        if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Attribute)
                and target.value.attr == "mark"):
            found.append((target.attr, sub))
    return found


def marked_tests(path: Path) -> tuple[list[str], list[ast.AST]]:
    """The names of the module's tests that carry a tier mark (the module's own, a decorator's or a parameter's),
    and every `slow` mark's node."""
    tree = ast.parse(path.read_text())
    module_marks = [name for stmt in tree.body if isinstance(stmt, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in stmt.targets)
                    for name, _ in mark_names(stmt.value)]
    helpers = {stmt.name: stmt for stmt in tree.body if isinstance(stmt, ast.FunctionDef)}
    names, slow = [], [node for name, node in mark_names(tree) if name == "slow"]
    for stmt in tree.body:
        if not (isinstance(stmt, ast.FunctionDef) and stmt.name.startswith("test_")):
            continue
        marks = {name for d in stmt.decorator_list for name, _ in mark_names(d)} | set(module_marks)
        called = {n.func.id for d in stmt.decorator_list for n in ast.walk(d)
                  if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in helpers}
        marks |= {name for h in called for name, _ in mark_names(helpers[h])}  # a helper that marks parameters
        if marks & TIER_MARKS:
            names.append(stmt.name)
    return names, slow


def test_every_test_module_and_every_test_outside_the_default_tier_is_in_docs_testing():
    page = (ROOT / "docs" / "testing.md").read_text()
    missing = []
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        if f"tests/{path.name}" not in page:
            missing.append(path.name)
        names, _ = marked_tests(path)
        missing += [f"{path.name}::{name}" for name in names if f"::{name}" not in page]
    assert not missing, f"not in docs/testing.md (run .ci/testing_table.py): {missing}"


def test_every_test_left_out_of_ci_says_why_in_its_mark():
    unexplained = []
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        for node in marked_tests(path)[1]:
            if not (isinstance(node, ast.Call) and any(k.arg == "reason" for k in node.keywords)):
                unexplained.append(f"{path.name}:{node.lineno}")
    assert not unexplained, f"pytest.mark.slow(reason=...) wanted at {unexplained}"


def test_the_map_reads_marks_as_pytest_does(tmp_path):
    """A planted module: a module mark, a decorator, a parameter's mark through a helper, an unexplained slow."""
    planted = tmp_path / "test_planted.py"
    planted.write_text(
        "import pytest\n"
        "def tier(n):\n    return pytest.param(n, marks=pytest.mark.library)\n"
        "@pytest.mark.slow\ndef test_a():\n    pass\n"
        "@pytest.mark.parametrize('n', [tier(1), 2])\ndef test_b(n):\n    pass\n"
        "def test_c():\n    pass\n")
    names, slow = marked_tests(planted)
    assert names == ["test_a", "test_b"] and len(slow) == 1 and not isinstance(slow[0], ast.Call)
    planted.write_text("import pytest\npytestmark = pytest.mark.reliability\ndef test_d():\n    pass\n")
    assert marked_tests(planted)[0] == ["test_d"]
