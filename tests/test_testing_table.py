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


def test_tests_go_out_longest_first_by_the_costs_docs_testing_shows(tmp_path):
    """The order xdist hands tests out in (tests/conftest.py) comes from the page's measured costs: whole modules
    under --dist loadfile, single tests under --dist load, a test the page does not time yet first."""
    from types import SimpleNamespace

    from conftest import longest_first, measured_costs

    page = tmp_path / "testing.md"
    page.write_text("\n".join([
        "| `tests/test_a.py` | 2 | 3.0 s | 2.0 s `test_one` |",  # make test: one row a module
        "| `tests/test_b.py` | 1 | 9.5 s | 9.5 s `test_big` |",
        "| `tests/test_r.py::test_short` | a short wait | [1](reliability.md#summary) | 4.0 s |",
        "| `tests/test_r.py::test_long[x]` | a long wait |  | 120.5 s |",
        "| `tests/test_s.py::test_mid` | in between |  | 30.0 s |",
    ]))
    tests, modules = measured_costs(page)
    assert tests == {"tests/test_r.py::test_short": 4.0, "tests/test_r.py::test_long[x]": 120.5,
                     "tests/test_s.py::test_mid": 30.0}
    assert modules == {"tests/test_a.py": 3.0, "tests/test_b.py": 9.5}

    def items(*ids):
        return [SimpleNamespace(nodeid=i) for i in ids]

    def ids(out):
        return [i.nodeid for i in out]

    tier = items("tests/test_a.py::test_one", "tests/test_a.py::test_two", "tests/test_b.py::test_big",
                 "tests/test_new.py::test_it")
    assert ids(longest_first(tier, True, tests, modules)) == [
        "tests/test_new.py::test_it", "tests/test_b.py::test_big", "tests/test_a.py::test_one",
        "tests/test_a.py::test_two"]
    waits = items("tests/test_r.py::test_short", "tests/test_s.py::test_mid", "tests/test_r.py::test_long[x]")
    assert ids(longest_first(waits, False, tests, modules)) == [
        "tests/test_r.py::test_long[x]", "tests/test_s.py::test_mid", "tests/test_r.py::test_short"]
    # by module: test_r's two tests (124.5 s) go out together, before test_s (30 s), in their own order
    assert ids(longest_first(waits, True, tests, modules)) == [
        "tests/test_r.py::test_short", "tests/test_r.py::test_long[x]", "tests/test_s.py::test_mid"]
    assert measured_costs(tmp_path / "absent.md") == ({}, {})
