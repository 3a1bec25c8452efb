"""How a shell run's exit status and output tails become a `Result`: the `rota.result` line
and secret redaction.

`shell.py` holds the contract ("Outcome", "Untrusted output"); `shell_runs.py` reads the
status and tails this module maps.

The rota.result line
  If the last stdout line is a JSON object whose key "rota.result" holds an object, that object
  may set `outcome` (completed, failed, waiting, handoff; on exit 0 only, where failed gives
  error_code "reported_failure": a non-zero exit always fails), `data` (kept as data["result"]),
  `permanent`, `retry_unknown`, `turn` ({"status", "comment"}, kept as data["core.turn.v1"])
  and `usage`: an object of amounts by unit ({"usd": 0.42, "tokens": 1800}), reported beside
  the wall-clock "minutes" the executor measures itself (a non-zero exit's too), which budgets
  charge. Each unit matches ^[a-z][a-z0-9_]{0,31}$ and is not turns or attempts (rota counts
  those) nor minutes; each amount is a finite, non-negative number. `artifacts` is a list of
  artifact references, each an object {"name", "uri", "digest", "size"} (digest and size
  optional; rota.domain.artifacts), recorded with the outcome whatever the exit status.
  `validate_result` checks the result; an unsound one becomes a failed result, error_code
  "invalid_result", with the validation message (and only the minutes as usage).
"""

from __future__ import annotations

from typing import Any

import msgspec

from rota.domain.artifacts import Artifact, artifact_from
from rota.domain.errors import DomainCode, InvalidCommand, RotaError
from rota.domain.results import MAX_MESSAGE, TURN_KEY, Result, validate_result

EX_CONFIG = 78
TAIL_CHARS = 4096
RESULT_KEY = "rota.result"
RESULT_FIELDS = ("outcome", "data", "permanent", "retry_unknown", "turn", "usage", "artifacts")
MINUTES = "minutes"  # the usage unit the executor reports itself: a run's wall-clock minutes
OUTCOMES = ("completed", "failed", "waiting", "handoff")
REDACTED = "[redacted]"
KILLED = "the process ended without recording its exit status"


def redact(text: str, secrets: tuple[str, ...]) -> str:
    """`text` with every secret replaced (pass the longest secrets first)."""
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return text


def tail_text(raw: bytes, secrets: tuple[str, ...]) -> str:
    return redact(raw.decode("utf-8", errors="replace"), secrets)[-TAIL_CHARS:]


def build_result(
    code: int | None,
    reason: str | None,
    stdout: bytes,
    stderr: bytes,
    secrets: tuple[str, ...],
    lease_lost: bool,
    minutes: float,
) -> Result:
    """The Result of a run: `code` is the exit code (-N: killed by signal N; None: unknown),
    `reason` "cancelled" or "timed_out" when rota stopped it, `stdout`/`stderr` the tails."""
    data = {
        "exit_code": code,
        "stdout_tail": tail_text(stdout, secrets),
        "stderr_tail": tail_text(stderr, secrets),
    }
    usage = {MINUTES: minutes}
    if reason == "timed_out":
        return _failed("timed_out", "the deadline passed; the process was stopped", data, usage)
    if reason is not None:
        return _failed("cancelled", "lease lost" if lease_lost else "cancelled", data, usage)
    if code is None:
        return _failed("killed", KILLED, data, usage)
    result = _by_exit(code, data, usage)
    try:
        declared = _declared(stdout)
        if declared is not None:
            result = _apply(result, declared, code)
        validated = validate_result(result)
        encoded = msgspec.json.encode([validated.data, validated.artifacts])
        if any(msgspec.json.encode(secret)[1:-1] in encoded for secret in secrets):
            raise InvalidCommand(
                f"{RESULT_KEY} data or artifacts hold a value of ctx.env: not stored"
            )
        return result
    except RotaError as error:
        message = redact(error.message, secrets)[:MAX_MESSAGE]
        return _failed("invalid_result", message, data, usage)


def _failed(code: str, message: str, data: Any, usage: dict[str, float]) -> Result:
    return Result(outcome="failed", error_code=code, error_message=message, data=data, usage=usage)


def _by_exit(code: int, data: dict[str, Any], usage: dict[str, float]) -> Result:
    if code == 0:
        return Result(outcome="completed", data=data, usage=usage)
    if code == EX_CONFIG:
        message = "process exited with code 78 (EX_CONFIG): its configuration or input is invalid"
        failed = _failed("invalid_config", message, data, usage)
        return msgspec.structs.replace(failed, permanent=True)
    if code < 0:
        return _failed(f"signal_{-code}", f"process was killed by signal {-code}", data, usage)
    return _failed(f"exit_{code}", f"process exited with code {code}", data, usage)


def _declared(stdout: bytes) -> dict[str, Any] | None:
    """The object under "rota.result" on the last stdout line, if that line declares one."""
    last = stdout.rstrip().rsplit(b"\n", 1)[-1].strip()
    if not last.startswith(b"{"):
        return None
    try:
        line = msgspec.json.decode(last)
    except (msgspec.DecodeError, RecursionError):
        return None
    if not isinstance(line, dict) or RESULT_KEY not in line:
        return None
    declared = line[RESULT_KEY]
    if not isinstance(declared, dict):
        raise InvalidCommand(f"{RESULT_KEY} must be an object", code=DomainCode.INVALID_RESULT)
    return declared


def _apply(base: Result, declared: dict[str, Any], code: int) -> Result:
    unknown = sorted(str(key) for key in declared if key not in RESULT_FIELDS)
    if unknown:
        raise InvalidCommand(f"{RESULT_KEY} has unknown fields {unknown}; allowed: {RESULT_FIELDS}")
    outcome = declared.get("outcome", base.outcome)
    if outcome not in OUTCOMES:
        raise InvalidCommand(f"{RESULT_KEY} outcome must be one of {OUTCOMES}")
    flags = {flag: declared.get(flag, False) for flag in ("permanent", "retry_unknown")}
    if not all(isinstance(value, bool) for value in flags.values()):
        raise InvalidCommand(f"{RESULT_KEY} permanent and retry_unknown must be booleans")
    data = dict(base.data)
    if "data" in declared:
        data["result"] = declared["data"]
    if isinstance(turn := declared.get("turn"), dict):
        turn = {"status": turn.get("status"), "comment": turn.get("comment", "")}
    if "turn" in declared:
        data[TURN_KEY] = turn
    result = msgspec.structs.replace(
        base, data=data, usage=_usage(base.usage, declared.get("usage", {})),
        permanent=base.permanent or flags["permanent"], retry_unknown=flags["retry_unknown"],
        artifacts=_artifacts(declared.get("artifacts", [])),
    )  # fmt: skip
    if code != 0:  # a non-zero exit fails whatever the line says
        return result
    if outcome != "failed":
        return msgspec.structs.replace(result, outcome=outcome)
    message = "process exited 0 and reported a failed outcome"
    return msgspec.structs.replace(
        result, outcome="failed", error_code="reported_failure", error_message=message
    )


def _artifacts(declared: Any) -> list[Artifact]:
    """The declared artifact references, each checked (`invalid_artifact`)."""
    if not isinstance(declared, list):
        raise InvalidCommand(
            f"{RESULT_KEY} artifacts must be a list of objects", code=DomainCode.INVALID_ARTIFACT
        )
    return [artifact_from(item, f"{RESULT_KEY} artifacts[{i}]") for i, item in enumerate(declared)]


def _usage(measured: dict[str, float], declared: Any) -> dict[str, float]:
    """The measured minutes and the declared units (their names and amounts are checked by
    `validate_result`, as every executor's usage is)."""
    if not isinstance(declared, dict):
        raise InvalidCommand(
            f"{RESULT_KEY} usage must be an object of amounts by unit",
            code=DomainCode.INVALID_USAGE,
        )
    if MINUTES in declared:
        raise InvalidCommand(
            f"{RESULT_KEY} usage cannot report {MINUTES!r}: the shell executor measures a run's "
            "wall-clock minutes itself",
            code=DomainCode.INVALID_USAGE,
        )
    return {**measured, **declared}
