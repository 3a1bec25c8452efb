"""Attempt failure codes: every code rota gives a failed attempt is a `FailureCode` member,
each member is in docs/errors.md, and the strings are the ones the log always held."""

from __future__ import annotations

import ast
import re
from enum import StrEnum
from pathlib import Path

import pytest

import rota
from rota.codes import failure_rows, meanings, render
from rota.domain.failures import FailureCode
from rota.infrastructure.executors.shell_result import build_result

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "errors.md"
PRODUCT = ("domain", "projections", "application", "infrastructure", "replay", "rota")

# The strings in logs written before the enum: a member is never renamed.
LOGGED = {
    "failed", "timed_out", "lost", "cancelled", "killed", "exit_<n>", "signal_<n>",
    "invalid_config", "invalid_result", "reported_failure", "unhandled_exception",
    "invalid_retry_hint", "executor_error", "launch_ambiguous", "launch_unacknowledged",
    "environment_unavailable", "unsupported_generation", "recovery_failed",
    "input_forgotten", "input_unreadable",
}  # fmt: skip


def given_codes(source: str) -> list[ast.expr]:
    """What a product module passes as `error_code=` (or as `_failure`/`_failed`'s code)."""
    found: list[ast.expr] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        found.extend(kw.value for kw in node.keywords if kw.arg == "error_code")
        name = node.func.id if isinstance(node.func, ast.Name) else ""
        if name in ("_failure", "_failed") and node.args:
            found.append(node.args[0])
    return found


def _members_named(value: ast.expr) -> list[str] | None:
    """The codes an expression gives, when it is a literal or a FailureCode member (None:
    a variable, passed through from elsewhere)."""
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return [value.value]
    if isinstance(value, ast.JoinedStr):  # f"exit_{n}": its family
        head = value.values[0]
        assert isinstance(head, ast.Constant)
        return [f"{head.value}<n>"]
    if (
        isinstance(value, ast.Attribute)
        and isinstance(value.value, ast.Name)
        and value.value.id == "FailureCode"
    ):
        return [FailureCode[value.attr].value]
    if isinstance(value, ast.BoolOp):
        return [c for v in value.values for c in (_members_named(v) or [])]
    return None


def test_every_code_a_product_module_gives_an_attempt_is_a_member() -> None:
    members = {m.value for m in FailureCode}
    unknown, seen = [], set()
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for value in given_codes(path.read_text()):
                for code in _members_named(value) or []:
                    seen.add(code)
                    if code not in members:
                        unknown.append(f"{path.relative_to(ROOT)}:{value.lineno}: {code}")
    assert not unknown, "add a FailureCode member (and regenerate docs/errors.md):\n" + "\n".join(
        unknown
    )
    assert len(seen) >= 12  # the scan finds the codes at all


def test_the_scan_finds_each_form() -> None:
    source = (
        'Result(outcome="failed", error_code="a")\n'
        "Result(error_code=FailureCode.LOST)\n"
        '_failed(f"exit_{code}", "m", data, usage)\n'
        "_failure(FailureCode.EXECUTOR_ERROR, message)\n"
        "AttemptFailed(error_code=code)\n"
    )
    named = [_members_named(v) for v in given_codes(source)]
    assert named == [["a"], ["lost"], ["exit_<n>"], ["executor_error"], None]


def test_the_strings_are_the_ones_in_the_logs() -> None:
    assert {m.value for m in FailureCode} == LOGGED
    assert rota.FailureCode is FailureCode


def test_every_member_is_documented_in_the_errors_doc() -> None:
    documented = meanings(FailureCode)
    doc = DOC.read_text()
    section = doc.split("## Attempt failure codes", 1)[1]
    for member in FailureCode:
        assert documented.get(member.name), f"FailureCode.{member.name} needs a docstring"
        assert f"| `{member.value}` |" in section, f"{member.value} is missing from errors.md"
    assert doc == render()


class _Undocumented(StrEnum):
    KNOWN = "known"
    """Documented."""
    BARE = "bare"


def test_a_member_without_a_docstring_is_refused_by_the_renderer() -> None:
    with pytest.raises(ValueError, match="BARE has no docstring"):
        failure_rows(_Undocumented)


@pytest.mark.parametrize(
    ("code", "member"),
    [
        ("exit_3", FailureCode.EXIT),
        ("signal_9", FailureCode.SIGNAL),
        ("timed_out", FailureCode.TIMED_OUT),
        ("quota", None),  # the Work's own (rota.Fail)
        ("exit_", None),
    ],
)
def test_of_maps_a_concrete_code_to_its_member(code: str, member: FailureCode | None) -> None:
    assert FailureCode.of(code) is member


def test_concrete_spells_a_family_code() -> None:
    assert FailureCode.EXIT.concrete(3) == "exit_3"
    assert FailureCode.SIGNAL.concrete(15) == "signal_15"
    with pytest.raises(ValueError):
        FailureCode.LOST.concrete(1)


@pytest.mark.parametrize(
    ("exit_code", "reason", "stdout"),
    [
        (3, None, b""),
        (-9, None, b""),
        (78, None, b""),
        (None, None, b""),
        (1, "timed_out", b""),
        (1, "cancelled", b""),
        (0, None, b'{"rota.result": {"outcome": "failed"}}\n'),
        (0, None, b'{"rota.result": {"outcome": "nope"}}\n'),
    ],
)
def test_every_shell_failure_is_a_member(
    exit_code: int | None, reason: str | None, stdout: bytes
) -> None:
    result = build_result(exit_code, reason, stdout, b"", (), False, 0.1)
    assert result.outcome == "failed" and result.error_code is not None
    assert FailureCode.of(result.error_code) is not None, result.error_code
    assert re.fullmatch(r"[a-z_0-9]+", result.error_code)
