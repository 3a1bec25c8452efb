"""Artifact references (seed 001: results preserve artifact-reference history): the type and
its checks, a result's validation, the shell executor's `rota.result` line, the outcome
event that records them, and logs written before them decoding unchanged."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

import rota
from rota.domain.artifacts import Artifact, artifact_from, check_artifact, check_artifacts
from rota.domain.errors import InvalidCommand
from rota.domain.events import (
    AttemptClaimed,
    AttemptCompleted,
    AttemptFailed,
    InputAccepted,
    WorkSubmitted,
)
from rota.domain.events.execution import _Outcome
from rota.domain.evolve import evolve
from rota.domain.outcomes import finish
from rota.domain.policy import Binding, Pinned, Registration
from rota.domain.results import Result, validate_result
from rota.domain.starts import claim
from rota.domain.state import WorkState
from rota.infrastructure.codec import DEFAULT_CODEC
from rota.infrastructure.executors.inproc import to_result
from rota.infrastructure.executors.shell_result import build_result

SHA = "sha256:" + "0123456789abcdef" * 4
GOOD = Artifact(name="report.html", uri="s3://reports/2026/r.html", digest=SHA, size=5120)
T0 = datetime(2026, 12, 7, 9, tzinfo=UTC)


def refused(artifact: Artifact) -> str:
    with pytest.raises(InvalidCommand) as error:
        check_artifact(artifact)
    assert error.value.code == "invalid_artifact"
    return error.value.message


def test_a_sound_reference_passes_and_is_exported_from_rota() -> None:
    assert rota.Artifact is Artifact
    assert check_artifact(GOOD) is GOOD
    for uri in ("file:///var/out/a.txt", "https://cdn.example.com/a.txt", "gs://b/k", "oci://r/i"):
        check_artifact(Artifact(name="a", uri=uri))
    check_artifact(Artifact(name="logs/run-1.txt", uri="s3://b/k", size=0))
    check_artifact(Artifact(name="a", uri="s3://b/k", digest="sha512:" + "ab" * 64))


@pytest.mark.parametrize(
    ("artifact", "said"),
    [
        (Artifact(name="", uri="s3://b/k"), "name"),
        (Artifact(name="report\n", uri="s3://b/k"), "name"),
        (Artifact(name="a b", uri="s3://b/k"), "name"),
        (Artifact(name="x" * 129, uri="s3://b/k"), "name"),
        (Artifact(name="a", uri="no-scheme"), "scheme:rest"),
        (Artifact(name="a", uri="S3://b/k"), "scheme:rest"),
        (Artifact(name="a", uri="s3://b/with space"), "scheme:rest"),
        (Artifact(name="a", uri="javascript:alert(1)"), "scheme 'javascript'"),
        (Artifact(name="a", uri="ftp://host/f"), "scheme 'ftp'"),
        (Artifact(name="a", uri="https://user:pw@host/f"), "user information"),
        (Artifact(name="a", uri="https://host/f?X-Amz-Signature=abc"), "query or fragment"),
        (Artifact(name="a", uri="https://host/f#frag"), "query or fragment"),
        (Artifact(name="a", uri="s3://b/" + "k" * 2048), "2048"),
        (Artifact(name="a", uri="s3://b/k", digest="sha256:abc"), "digest"),
        (Artifact(name="a", uri="s3://b/k", digest=SHA.upper()), "digest"),
        (Artifact(name="a", uri="s3://b/k", digest="md5:" + "0" * 32), "digest"),
        (Artifact(name="a", uri="s3://b/k", size=-1), "size"),
        (Artifact(name="a", uri="s3://b/k", size=True), "size"),
        (Artifact(name="a", uri="s3://b/k", size=1.5), "size"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_reference_is_refused_naming_what(artifact: Artifact, said: str) -> None:
    assert said in refused(artifact)


def test_a_list_is_at_most_100_with_distinct_names() -> None:
    check_artifacts([Artifact(name=f"a{i}", uri="s3://b/k") for i in range(100)])
    with pytest.raises(InvalidCommand, match="at most 100"):
        check_artifacts([Artifact(name=f"a{i}", uri="s3://b/k") for i in range(101)])
    with pytest.raises(InvalidCommand, match="given twice"):
        check_artifacts([GOOD, GOOD])
    with pytest.raises(InvalidCommand, match=r"must be a rota\.Artifact"):
        check_artifacts([{"name": "a", "uri": "s3://b/k"}])


def test_a_result_is_validated_with_its_artifacts_and_a_callable_gets_invalid_result() -> None:
    assert validate_result(Result(artifacts=[GOOD])).artifacts == [GOOD]
    bad = Result(artifacts=[Artifact(name="a", uri="https://u:p@h/f")])
    with pytest.raises(InvalidCommand) as error:
        validate_result(bad)
    assert error.value.code == "invalid_artifact"
    failed = to_result(bad)
    assert (failed.outcome, failed.error_code) == ("failed", "invalid_result")
    assert "user information" in (failed.error_message or "")
    # References a callable added through its context come first, then the Result's own.
    added = Artifact(name="log.txt", uri="file:///tmp/log.txt")
    assert to_result(rota.Result(artifacts=[GOOD]), [added]).artifacts == [added, GOOD]
    assert to_result({"rows": 1}, [added]).artifacts == [added]


def test_the_context_helper_checks_at_once_and_refuses_a_repeated_name() -> None:
    ctx = rota.LaunchContext(
        work_id="w", attempt=1, epoch=1, inputs=[], input_positions=[], config={}, deadline=T0
    )
    made = ctx.add_artifact("report.html", "s3://reports/r.html", digest=SHA, size=3)
    assert ctx.artifacts == [made] and made.size == 3
    with pytest.raises(InvalidCommand) as again:
        ctx.add_artifact("report.html", "s3://reports/other.html")
    assert again.value.code == "invalid_artifact"
    with pytest.raises(InvalidCommand):
        ctx.add_artifact("x", "s3://b/k", digest="nope")
    assert len(ctx.artifacts) == 1


def test_artifact_from_a_json_object_refuses_unknown_and_missing_fields() -> None:
    assert artifact_from({"name": "a", "uri": "s3://b/k", "size": 2}) == Artifact(
        name="a", uri="s3://b/k", size=2
    )
    with pytest.raises(InvalidCommand, match=r"unknown fields \['sha'\]"):
        artifact_from({"name": "a", "uri": "s3://b/k", "sha": "x"})
    with pytest.raises(InvalidCommand, match="uri"):
        artifact_from({"name": "a"})
    with pytest.raises(InvalidCommand, match="size"):
        artifact_from({"name": "a", "uri": "s3://b/k", "size": "3"})


# -- the shell executor's result line ------------------------------------------------------


def shell(line: dict[str, Any], code: int = 0, secrets: tuple[str, ...] = ()) -> Result:
    stdout = b"working\n" + msgspec.json.encode({"rota.result": line}) + b"\n"
    return build_result(code, None, stdout, b"", secrets, False, 0.5)


def test_a_shell_job_declares_artifacts_in_its_result_line_whatever_its_exit() -> None:
    ref = {"name": "r.csv", "uri": "s3://reports/r.csv", "digest": SHA, "size": 10}
    done = shell({"artifacts": [ref]})
    assert done.outcome == "completed"
    assert done.artifacts == [Artifact(name="r.csv", uri="s3://reports/r.csv", digest=SHA, size=10)]
    failed = shell({"artifacts": [ref]}, code=3)
    assert failed.error_code == "exit_3" and failed.artifacts == done.artifacts


@pytest.mark.parametrize(
    ("artifacts", "said"),
    [
        ({"name": "a"}, "artifacts must be a list"),
        ([{"name": "a", "uri": "https://host/f?sig=1"}], "query or fragment"),
        ([{"name": "a", "uri": "s3://b/k", "extra": 1}], "unknown fields"),
        ([{"name": "a", "uri": "s3://b/k"}, {"name": "a", "uri": "s3://b/j"}], "given twice"),
    ],
)
def test_a_bad_shell_artifact_fails_the_attempt_invalid_result(artifacts: Any, said: str) -> None:
    result = shell({"artifacts": artifacts})
    assert (result.outcome, result.error_code) == ("failed", "invalid_result")
    assert said in (result.error_message or "")
    assert result.artifacts == []


def test_a_shell_artifact_holding_a_secret_value_is_not_stored() -> None:
    secret = "tok-9d1c7e2f"
    result = shell({"artifacts": [{"name": "a", "uri": f"s3://b/{secret}"}]}, secrets=(secret,))
    assert (result.outcome, result.error_code) == ("failed", "invalid_result")
    assert secret not in (result.error_message or "") and result.artifacts == []


# -- the outcome event, and logs written before artifacts ------------------------------------


PINNED = Pinned(
    generation="g",
    binding=Binding(name="b", executor="e"),
    registration=Registration(name="e"),
    timeout_seconds=60,
    lease_seconds=60,
)


def step(work: WorkState | None, event: Any, position: int) -> WorkState:
    folded = evolve(work, event, position, T0)
    assert folded is not None
    return folded


def _claimed_work() -> WorkState:
    work = step(None, WorkSubmitted(work_id="w", scope="root", binding="b"), 1)
    work = step(work, InputAccepted(work_id="w", key="k"), 2)
    return step(work, claim(work, now=T0, owner="o", pinned=PINNED).event, 3)


def artifacts_of(event: Any) -> list[Artifact]:
    assert isinstance(event, _Outcome)
    return event.artifacts


def test_the_outcome_event_records_them_and_the_fold_keeps_every_segments() -> None:
    work = _claimed_work()
    (parked,) = finish(work, 1, 1, T0, Result(outcome="waiting", artifacts=[GOOD]))
    assert artifacts_of(parked.event) == [GOOD]
    work = step(work, parked.event, 4)
    assert work.current is not None and work.current.artifacts == (GOOD,)
    work = step(work, InputAccepted(work_id="w", key="k2"), 5)
    work = step(work, claim(work, now=T0, owner="o", pinned=PINNED).event, 6)
    assert work.current is not None and work.current.epoch == 2
    second = Artifact(name="final.txt", uri="file:///out/final.txt", size=0)
    (completed,) = finish(work, 1, 2, T0, Result(artifacts=[second]))
    work = step(work, completed.event, 7)
    assert work.current is not None
    assert work.current.artifacts == (GOOD, second)  # every segment's, oldest first
    assert work.state == "completed"
    (plain,) = finish(_claimed_work(), 1, 1, T0, Result())
    assert artifacts_of(plain.event) == []  # none given: an empty list


def test_events_written_before_artifacts_and_grants_decode_unchanged() -> None:
    old_outcome = b'{"type":"core.execution.completed","work_id":"w","attempt":1,"epoch":1,"data":null,"usage":{},"consumed":[]}'  # noqa: E501
    event = DEFAULT_CODEC.decode("core.execution.completed", 1, old_outcome, 7)
    assert isinstance(event, AttemptCompleted) and event.artifacts == []
    old_failed = (
        b'{"type":"core.execution.failed","work_id":"w","attempt":1,"epoch":1,"error_code":"x"}'
    )
    failed = DEFAULT_CODEC.decode("core.execution.failed", 1, old_failed, 8)
    assert isinstance(failed, AttemptFailed) and failed.artifacts == []
    old_submit = b'{"type":"core.work.submitted","work_id":"w","scope":"root","binding":"b"}'
    submitted = DEFAULT_CODEC.decode("core.work.submitted", 1, old_submit, 1)
    assert isinstance(submitted, WorkSubmitted) and submitted.grants == []
    claimed = _claimed_work().current
    assert claimed is not None
    payload = msgspec.json.decode(
        DEFAULT_CODEC.encode_payload(
            AttemptClaimed(
                work_id="w", attempt=1, epoch=1, owner="o", lease_expires_at=T0, deadline=T0,
                consumed=[2], trigger=2, pinned=claimed.pinned,
            )
        )
    )  # fmt: skip
    payload.pop("grants", None)  # (version 2 leaves a default out: a pre-grants claim never had it)
    old_claim = DEFAULT_CODEC.decode("core.execution.claimed", 1, msgspec.json.encode(payload), 3)
    assert isinstance(old_claim, AttemptClaimed) and old_claim.grants == []
    # Encoded with them, they read back as given.
    new = AttemptCompleted(work_id="w", attempt=1, epoch=1, artifacts=[GOOD])
    tag, version, raw = DEFAULT_CODEC.encode(new)
    assert DEFAULT_CODEC.decode(tag, version, raw, 9) == new
