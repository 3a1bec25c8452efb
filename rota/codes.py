"""Every error code rota shows, one enum per boundary, and the renderer of docs/errors.md.

`python -P -m rota.codes > docs/errors.md` regenerates the tables from the enums (each
member's docstring is its meaning; the codes of failed attempts, `FailureCode`, have a table
of their own); a test fails when the committed file and the enums
disagree, so the CLI, the HTTP API, doctor and the docs cannot drift apart.
"""

from __future__ import annotations

import ast
import inspect
from enum import StrEnum

from rota.api_errors import ApiCode
from rota.application.errors import PortCode
from rota.domain.errors import DomainCode, ErrorCode
from rota.domain.failures import FailureCode
from rota.http.errors import HttpCode
from rota.http.web.errors import WebCode
from rota.infrastructure.config import EntryCode
from rota.replay.errors import ReplayCode
from rota.verify import VerifyCode

# Inner first: a code raised in two layers belongs to the inner one. The standalone verifier's
# codes are a plain StrEnum: rota.verify imports nothing of rota, not even ErrorCode.
BOUNDARIES: tuple[tuple[str, type[StrEnum]], ...] = (
    ("domain", DomainCode),
    ("ports", PortCode),
    ("entry points", EntryCode),
    ("replay", ReplayCode),
    ("embedded API", ApiCode),
    ("http", HttpCode),
    ("web view", WebCode),
    ("standalone verifier", VerifyCode),
)

HEADER = """# Error codes

Every error rota raises on purpose carries a stable **code**. The `rota` command prints it
as `rota: <code>: <message>` on stderr (exit status 2 for `usage` and `invalid_config`, 1
otherwise); `rota doctor` and the HTTP API show it verbatim. Match on the code: a message
may be reworded, a code is never renamed or reused.

Generated from the enums by `python -P -m rota.codes > docs/errors.md` (a test checks it is
current). Each code belongs to one boundary, the innermost layer that raises it:

| boundary | enum | its codes |
|---|---|---|
"""

TABLE = """
## Codes

Codes documented as *Waiting* are not raised: they say why admission held a ready Work back
in a pass (`rota work show`, `rota capacity`, `rota explain`); it starts once the reason
clears.

| code | boundary | what it means, what to do |
|---|---|---|
"""

FAILURES = """
## Attempt failure codes

Not raised to a caller: the code a failed attempt carries (`AttemptFailed.error_code`, an
attempt's `error.code` in `rota work show`, the HTTP API and a `WorkFailed`'s
`attempt_error`), one member of `rota.FailureCode` (`rota.domain.failures`) each. `exit_<n>`
and `signal_<n>` name families (`exit_3`, `signal_9`; `FailureCode.of(code)` finds the
member). Any other code is the Work's own: what its callable raised with `rota.Fail(code)`.

| code | what it means, what to do |
|---|---|
"""


def meanings(codes: type[StrEnum]) -> dict[str, str]:
    """Each member's docstring (the string literal under its assignment), by member name."""
    body = ast.parse(inspect.getsource(codes)).body[0]
    assert isinstance(body, ast.ClassDef)
    found: dict[str, str] = {}
    for statement, following in zip(body.body, body.body[1:], strict=False):
        if (
            isinstance(statement, ast.Assign)
            and isinstance(statement.targets[0], ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            found[statement.targets[0].id] = " ".join(following.value.value.split())
    return found


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(boundaries: tuple[tuple[str, type[StrEnum]], ...] = BOUNDARIES) -> str:
    parts = [HEADER]
    rows: list[tuple[str, str, str]] = []
    for boundary, codes in boundaries:
        summary = " ".join(inspect.cleandoc(codes.__doc__ or "").split("\n\n")[0].split())
        parts.append(f"| {boundary} | `{codes.__module__}.{codes.__name__}` | {summary} |\n")
        documented = meanings(codes)
        for member in codes:
            if member.name not in documented:
                raise ValueError(f"{codes.__name__}.{member.name} has no docstring")
            rows.append((member.value, boundary, documented[member.name]))
    parts.append(TABLE)
    for code, boundary, meaning in sorted(rows):
        parts.append(f"| `{code}` | {boundary} | {_cell(meaning)} |\n")
    parts.append(FAILURES)
    parts.extend(failure_rows())
    return "".join(parts)


def failure_rows(codes: type[StrEnum] = FailureCode) -> list[str]:
    """The table rows of the attempt failure codes, one per member, by code."""
    documented = meanings(codes)
    rows: list[str] = []
    for member in sorted(codes, key=lambda m: m.value):
        if member.name not in documented:
            raise ValueError(f"{codes.__name__}.{member.name} has no docstring")
        rows.append(f"| `{member.value}` | {_cell(documented[member.name])} |\n")
    return rows


__all__ = [
    "BOUNDARIES",
    "ApiCode",
    "DomainCode",
    "EntryCode",
    "ErrorCode",
    "FailureCode",
    "HttpCode",
    "PortCode",
    "ReplayCode",
    "VerifyCode",
]

if __name__ == "__main__":
    print(render(), end="")
