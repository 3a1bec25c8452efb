"""Error codes: one enum per boundary, every product module uses them, docs/errors.md is current."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import rota
from rota.codes import BOUNDARIES, meanings, render
from rota.domain.errors import ErrorCode, RotaError
from rota.verify import VerifyCode

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "errors.md"
PRODUCT = ("domain", "projections", "application", "infrastructure", "replay", "rota")


def literal_codes(source: str) -> list[int]:
    """Lines where a string literal is passed as `code=` or assigned to a class's `code`."""
    values: list[ast.expr] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            values.extend(kw.value for kw in node.keywords if kw.arg == "code")
        elif isinstance(node, ast.ClassDef):
            for statement in node.body:
                if isinstance(statement, ast.Assign):
                    targets, value = statement.targets, statement.value
                elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
                    targets, value = [statement.target], statement.value
                else:
                    continue
                if any(isinstance(t, ast.Name) and t.id == "code" for t in targets):
                    values.append(value)
    return sorted(value.lineno for value in values if _may_be_a_literal(value))


def _may_be_a_literal(value: ast.expr) -> bool:
    """Whether a string literal can be the value: `"a"`, `f"{a}"`, `x or "a"`, `"a" if c else b`."""
    if isinstance(value, ast.Constant | ast.JoinedStr):
        return isinstance(value, ast.JoinedStr) or isinstance(value.value, str)
    if isinstance(value, ast.IfExp):
        return _may_be_a_literal(value.body) or _may_be_a_literal(value.orelse)
    if isinstance(value, ast.BoolOp):
        return any(_may_be_a_literal(v) for v in value.values)
    return False


def test_errors_doc_is_current() -> None:
    assert DOC.read_text() == render(), (
        "docs/errors.md is stale: run `python -P -m rota.codes > docs/errors.md`"
    )


def test_no_product_module_passes_a_literal_code() -> None:
    problems = []
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            problems += [f"{name}:{line}" for line in literal_codes(path.read_text())]
    assert not problems, "use an ErrorCode member, not a literal:\n" + "\n".join(problems)


def test_the_literal_check_finds_each_form() -> None:
    source = (
        "class E(RotaError):\n"
        '    code = "a"\n'
        "class F(RotaError):\n"
        '    code: str = "b"\n'
        'raise E("m", code="c")\n'
        'raise E("m", code="d" if x else DomainCode.IDLE)\n'
        'raise E("m", code=x or f"{y}")\n'
        'raise E("m", code=DomainCode.IDLE if x == "y" else DomainCode.REFUSED)\n'
        'E("m", error_code="kept: an attempt\'s error code, not an error\'s")\n'
    )
    assert literal_codes(source) == [2, 4, 5, 6, 7]


def test_every_boundary_is_rendered_and_a_code_has_one_boundary() -> None:
    enums = [codes for _, codes in BOUNDARIES]
    # rota.verify imports nothing of rota, so its codes are a StrEnum, not an ErrorCode
    assert set(ErrorCode.__subclasses__()) | {VerifyCode} == set(enums)
    seen: dict[str, str] = {}
    for codes in enums:
        assert len(codes.__members__) == len(codes), f"{codes.__name__} has an alias"
        for member in codes:
            assert member.value not in seen, f"{member.value} is in {seen[member.value]} too"
            seen[member.value] = codes.__name__


def test_every_member_spells_its_code_and_has_a_one_line_docstring() -> None:
    for _, codes in BOUNDARIES:
        documented = meanings(codes)
        for member in codes:
            assert re.fullmatch(r"[a-z][a-z_]*", member.value), member
            assert member.name == member.value.upper(), member
            assert documented.get(member.name), f"{codes.__name__}.{member.name} needs a docstring"


def test_every_error_class_in_the_product_carries_an_error_code() -> None:
    for module in pkgutil.walk_packages(rota.__path__, "rota."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)
    classes, todo = [], [RotaError]
    while todo:
        cls = todo.pop()
        classes.append(cls)
        todo.extend(cls.__subclasses__())
    product = [cls for cls in classes if cls.__module__.startswith("rota.")]
    assert len(product) > 20
    wrong = [
        f"{cls.__module__}.{cls.__qualname__}"
        for cls in product
        if not isinstance(cls.code, ErrorCode)
    ]
    assert not wrong, wrong
