"""The production code keeps the shape the house holds it to (tests/code_shape.py measures
it): no module over 400 lines, no function over 40, no import circle, function-level
imports counted. The measure itself is tested on a planted package, so a guard that
stopped seeing would fail too."""

import textwrap

import pytest

from tests import code_shape

pytestmark = pytest.mark.sqlite  # reads source files only: one pass is enough


@pytest.fixture(scope="module")
def production():
    return code_shape.modules()


def test_no_production_module_is_over_400_lines(production):
    assert code_shape.long_modules(production) == []


def test_no_production_function_is_over_40_lines(production):
    assert code_shape.long_functions(production) == []


def test_no_module_imports_one_that_imports_it_back(production):
    assert code_shape.circles(production) == []


def test_the_measure_sees_what_it_guards(tmp_path):
    package = tmp_path / "planted"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from planted import b\n")
    (package / "b.py").write_text("def late():\n    from planted.c import x\n    return x\n")
    (package / "c.py").write_text("from .a import b as x\n" + "\n" * 400)
    body = "\n".join(f"    value = {n}" for n in range(41))
    (package / "d.py").write_text(textwrap.dedent(f"def long():\n{body}\n"))
    known = code_shape.modules(tmp_path, ("planted",))
    assert code_shape.circles(known) == [["planted.a", "planted.b", "planted.c"]]
    assert [name for name, _ in code_shape.long_modules(known)] == ["planted.c"]
    assert code_shape.long_functions(known) == [("planted.d:long", 42)]
