"""Artifact references: what an attempt produced, named where it lives (seed 001: results
preserve artifact-reference history).

An `Artifact` is a typed reference, never the artifact itself: a `name` unique within the
result, the `uri` where it is stored, and optionally its content `digest`
(`sha256:<64 hex>` or `sha512:<128 hex>`, lower case) and `size` in bytes. A result carries
a list of them (`Result.artifacts`); the outcome event records them, so the log, the
history, the views, the HTTP API and the export keep them.

A reference is written to a log that cannot be edited, so it must not carry a credential:
a URI with user information (`https://user:pass@host/...`), a query or a fragment (where
presigned URLs keep their signatures) is refused. The scheme is one of `SCHEMES`; the web
view links to http(s) references only.
"""

import re

import msgspec

from rota.domain.errors import DomainCode, InvalidCommand

# No `from __future__ import annotations`: `Artifact` is a stored type (see events/base.py).

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/@+-]{0,127}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128}")
SCHEMES = frozenset({"file", "http", "https", "s3", "gs", "az", "abfs", "abfss", "hdfs", "oci"})
URI = re.compile(r"([a-z][a-z0-9+.-]{0,15}):([\x21-\x7e]+)")
MAX_URI = 2048
MAX_ARTIFACTS = 100
MAX_SIZE = 2**63 - 1


class Artifact(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A reference to something an attempt produced: `name`, `uri`, `digest`, `size`."""

    name: str
    uri: str
    digest: str | None = None
    size: int | None = None


FIELDS = Artifact.__struct_fields__


def _refuse(message: str) -> InvalidCommand:
    return InvalidCommand(message, code=DomainCode.INVALID_ARTIFACT)


def check_artifact(artifact: Artifact, where: str = "artifact") -> Artifact:
    """Refuse (`invalid_artifact`) a reference that must not reach the log; return it."""
    name = artifact.name
    if type(name) is not str or not NAME.fullmatch(name):
        raise _refuse(f"{where} name {str(name)[:80]!a} must match {NAME.pattern}")
    where = f"{where} {name!r}"
    uri = artifact.uri
    if type(uri) is not str or len(uri) > MAX_URI:
        raise _refuse(f"{where}: uri must be a string of at most {MAX_URI} characters")
    found = URI.fullmatch(uri)
    if found is None:
        raise _refuse(
            f"{where}: uri must be scheme:rest with a lower-case scheme and no spaces or "
            "control characters (s3://bucket/key, https://host/path, file:///path)"
        )
    scheme, rest = found.groups()
    if scheme not in SCHEMES:
        raise _refuse(f"{where}: uri scheme {scheme!r} is not one of {', '.join(sorted(SCHEMES))}")
    if "?" in rest or "#" in rest:
        raise _refuse(
            f"{where}: uri has a query or fragment; a reference names where the artifact "
            "is, not how to reach it (no signatures or tokens in the log)"
        )
    authority = rest[2:].split("/", 1)[0] if rest.startswith("//") else ""
    if "@" in authority:
        raise _refuse(f"{where}: uri has user information (user@host): no credentials in the log")
    digest = artifact.digest
    if digest is not None and (type(digest) is not str or not DIGEST.fullmatch(digest)):
        raise _refuse(f"{where}: digest must be sha256:<64 hex> or sha512:<128 hex>, lower case")
    size = artifact.size
    if size is not None and (type(size) is not int or not 0 <= size <= MAX_SIZE):
        raise _refuse(f"{where}: size must be a whole number of bytes >= 0")
    return artifact


def check_artifacts(artifacts: object) -> list[Artifact]:
    """Refuse a list that is not at most 100 sound references with distinct names."""
    if not isinstance(artifacts, list | tuple):
        raise _refuse("artifacts must be a list of artifact references")
    if len(artifacts) > MAX_ARTIFACTS:
        raise _refuse(f"a result has {len(artifacts)} artifacts; at most {MAX_ARTIFACTS}")
    names: set[str] = set()
    for index, artifact in enumerate(artifacts):
        if not isinstance(artifact, Artifact):
            raise _refuse(
                f"artifacts[{index}] must be a rota.Artifact, not {type(artifact).__name__}"
            )
        check_artifact(artifact, f"artifacts[{index}]")
        if artifact.name in names:
            raise _refuse(f"artifacts[{index}]: the name {artifact.name!r} is given twice")
        names.add(artifact.name)
    return list(artifacts)


def artifact_from(value: object, where: str = "artifact") -> Artifact:
    """An `Artifact` from its JSON object form (a shell job's `rota.result` line, an HTTP
    body), checked; unknown or missing fields are refused with `invalid_artifact`."""
    if isinstance(value, dict):
        unknown = sorted(str(key) for key in value if key not in FIELDS)
        if unknown:
            raise _refuse(f"{where} has unknown fields {unknown}; allowed: {list(FIELDS)}")
    try:
        artifact = msgspec.convert(value, Artifact)
    except msgspec.ValidationError as exc:
        raise _refuse(f"{where}: {exc}") from None
    return check_artifact(artifact, where)
