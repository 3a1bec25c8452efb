"""Fuzzing the command line (issue 15, Must show): config files, CLI arguments, input
payloads and Work ids, each through `rota.cli.run` in process. Zero tracebacks (nothing but
a return code leaves `run`), zero hangs (a deadline per example), and every refusal is one
`rota: <code>: ...` line whose code is a member of rota's error enums."""

from __future__ import annotations

import contextlib
import io
import json
import re
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trial_scale import scale

from rota.cli import run
from rota.codes import BOUNDARIES

CODES = {str(member) for _, enum in BOUNDARIES for member in enum}
LINE = re.compile(r"^rota: ([a-z_0-9]+): ")
CONFIG = """\
[[bindings]]
name = "ok"
executor = "shell"
command = ["true"]
"""
FUZZ = settings(
    max_examples=scale(100, 1000),
    deadline=timedelta(seconds=10),  # a hang fails the example
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


class Place:
    """A directory with a config file and a store, every call naming both explicitly (so
    nothing lands in the working directory)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.config = root / "rota.toml"
        self.config.write_text(CONFIG)
        self.store = f"sqlite:///{root / 'rota.db'}"  # root is absolute: four slashes

    def call(self, *args: str, config: Path | None = None) -> tuple[int, str, str]:
        """`rota --config C --store S ARGS...` in process: (exit code, stdout, stderr)."""
        out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace")
        err = io.StringIO()
        argv = ["--config", str(config or self.config), "--store", self.store, *args]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = run(argv)
            except SystemExit as exc:  # only --help and friends exit through argparse
                code = exc.code if isinstance(exc.code, int) else 2
                assert code == 0, (argv, err.getvalue())
            out.flush()
        stdout = out.buffer.getvalue().decode("utf-8", "backslashreplace")  # type: ignore[attr-defined]
        return code, stdout, err.getvalue()


def judged(result: tuple[int, str, str], argv: Any) -> None:
    """Success, or one refusal line with a known code."""
    code, _, err = result
    assert "Traceback" not in err, (argv, err)
    if code == 0:
        return
    lines = err.splitlines()
    if lines and lines[0].startswith("{"):  # --json: the error as one JSON object
        assert len(lines) == 1, (argv, err)
        assert json.loads(lines[0])["error"]["code"] in CODES, (argv, err)
        return
    assert len(lines) == 1, (argv, err)
    match = LINE.match(lines[0])
    assert match and match.group(1) in CODES, (argv, err)
    assert code in (1, 2), (argv, code, err)


@pytest.fixture(scope="module")
def place() -> Iterator[Place]:
    with tempfile.TemporaryDirectory(prefix="rota-fuzz-") as root:
        yield Place(Path(root))


# -- strategies --------------------------------------------------------------------------

# Text as argv can carry it: any code point, and the surrogate escapes of undecodable bytes.
ARG_TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
    | st.sampled_from(["\udcff", "\udc80", "\ud800"]),
    max_size=40,
)
JSON_LEAF = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
JSON = st.recursive(
    JSON_LEAF,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
RAW_INPUT = st.one_of(
    JSON.map(json.dumps),
    st.builds(lambda n: "[" * n + "]" * n, st.integers(0, 6000)),
    st.builds(lambda n: "1" * n, st.integers(1, 6000)),
    st.sampled_from(["NaN", "-Infinity", '"\\ud800"', '{"a": "\\udfff"}', "1e400", "{", ""]),
    ARG_TEXT,
)
WORK_ID = st.one_of(
    st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._:@-]{0,20}\Z"),
    ARG_TEXT.filter(lambda t: not t.startswith("-")),
    st.text(max_size=200).filter(lambda t: not t.startswith("-") and "\x00" not in t),
)
NUMBER = st.one_of(
    st.integers(-5, 5).map(str),
    st.integers(-(10**30), 10**30).map(str),
    st.sampled_from(["", "x", "1.5", "0x10", "99999999999999999999999", "1_0", " 3 "]),
)
COMMAND = st.one_of(
    st.tuples(st.just("events"), st.sampled_from(["--after", "--limit"]), NUMBER),
    st.tuples(st.just("export"), st.just("--from"), NUMBER),
    st.tuples(st.just("work"), st.just("show"), WORK_ID),
    st.tuples(st.sampled_from(["cancel", "retry", "release"]), WORK_ID),
    st.tuples(st.sampled_from(["config"]), st.sampled_from(["show", "validate", "nope"])),
    st.tuples(st.sampled_from(["work", "events", "capacity", "doctor", "audit"]), ARG_TEXT),
    st.tuples(ARG_TEXT, ARG_TEXT),
)
TOML_VALUE = st.one_of(
    st.integers(-(10**6), 10**6).map(str),
    st.floats(allow_nan=False).map(repr).filter(lambda s: "e" not in s or "." in s),
    st.text(max_size=10).map(json.dumps),
    st.sampled_from(["true", "false", "[]", "[1, 2]", '["sh", "-c", "true"]', "{}", "1" * 5000]),
)
TOML_KEY = st.sampled_from(
    [
        "concurrency",
        "job_concurrency",
        "lease_seconds",
        "timeout_seconds",
        "pool_limits",
        "url",
        "synchronous",
        "name",
        "executor",
        "command",
        "environment",
        "max",
        "unit",
        "x",
    ]
)
TABLE = st.sampled_from(["settings", "store", "audit", "[bindings]", "[budgets]", "bogus"])
STRUCTURED_TOML = st.lists(
    st.tuples(TABLE, st.lists(st.tuples(TOML_KEY, TOML_VALUE), max_size=5)), max_size=4
).map(
    lambda tables: "".join(
        f"[{name}]\n" + "".join(f"{k} = {v}\n" for k, v in items) for name, items in tables
    )
)
CONFIG_BYTES = st.one_of(
    STRUCTURED_TOML.map(str.encode),
    st.binary(max_size=200),
    st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.builds(lambda n: ("a = " + "[" * n + "]" * n + "\n").encode(), st.integers(0, 3000)),
)


# -- the properties ----------------------------------------------------------------------


@FUZZ
@given(
    config=CONFIG_BYTES,
    command=st.sampled_from(
        [
            ("config", "validate"),
            ("events",),
            ("submit", "w", "--binding", "ok"),
            ("config", "show", "--json"),
        ]
    ),
)
def test_any_config_file(place: Place, config: bytes, command: tuple[str, ...]) -> None:
    path = place.root / "fuzzed.toml"
    path.write_bytes(config)
    judged(place.call(*command, config=path), (config, command))


@FUZZ
@given(command=COMMAND, json_errors=st.booleans())
def test_any_arguments(place: Place, command: tuple[str, ...], json_errors: bool) -> None:
    args = [*command, "--json"] if json_errors else list(command)
    judged(place.call(*args), args)


@FUZZ
@given(payload=RAW_INPUT, via_file=st.booleans())
def test_any_input_payload(place: Place, payload: str, via_file: bool) -> None:
    if via_file:
        path = place.root / "input.json"
        path.write_bytes(payload.encode("utf-8", "surrogatepass"))  # lone surrogates as bytes
        value = f"@{path}"
    else:
        value = payload
    judged(place.call("submit", "fuzz-input", "--binding", "ok", "--input", value), payload)
    judged(place.call("accept", "fuzz-input", "--input", value), payload)


@FUZZ
@given(work=WORK_ID)
def test_any_work_id(place: Place, work: str) -> None:
    judged(place.call("submit", work, "--binding", "ok", "--input", "{}"), work)
    judged(place.call("work", "show", work), work)
    judged(place.call("work", "show", work, "--json"), work)


def test_stdin_that_cannot_be_read_is_a_refusal(place: Place) -> None:
    """Under pytest stdin raises on read: `--input -` still refuses with a code."""
    code, _, err = place.call("submit", "from-stdin", "--binding", "ok", "--input", "-")
    assert code == 1 and err.startswith("rota: cannot_read: --input - (stdin): "), err
