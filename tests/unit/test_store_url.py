"""The one store URL parser (`rota.infrastructure.store_url`): SQLAlchemy's convention, and
paths that round-trip through a URL whatever they contain."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rota.application.errors import PortCode, StoreError
from rota.infrastructure.sqlite.log_file import sqlite_path
from rota.infrastructure.store_url import PostgresURL, SqliteURL, parse, sqlite_url
from rota.infrastructure.stores import open_store
from rota.replay.read_only import ReadOnlyLog


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///rota.db", "rota.db"),
        ("sqlite:///data/rota.db", "data/rota.db"),
        ("sqlite:////var/lib/rota/rota.db", "/var/lib/rota/rota.db"),
        ("rota.db", "rota.db"),
        ("/var/lib/rota/rota.db", "/var/lib/rota/rota.db"),
        ("sqlite:rota.db", "rota.db"),
        ("sqlite:///with space/100%.db", "with space/100%.db"),
    ],
)
def test_sqlite_urls_follow_sqlalchemy(url: str, path: str) -> None:
    parsed = parse(url)
    assert isinstance(parsed, SqliteURL)
    assert parsed.path == Path(path)


@pytest.mark.parametrize(
    "url", ["sqlite://", "sqlite:///", "sqlite://:memory:", ":memory:", "", "sqlite://host/x.db"]
)
def test_urls_that_name_no_file_are_refused(url: str) -> None:
    with pytest.raises(StoreError) as raised:
        parse(url)
    assert raised.value.code == PortCode.INVALID_STORE_URL


def test_an_unknown_scheme_is_refused_without_showing_the_url() -> None:
    with pytest.raises(StoreError) as raised:
        parse("mysql://root:hunter2@db/rota")
    assert raised.value.code == PortCode.INVALID_STORE_URL
    assert "hunter2" not in str(raised.value)


def test_postgresql_urls_are_kept_as_written() -> None:
    for url in ("postgresql://u@h:5432/db?schema=s", "postgres://u@h/db"):
        assert parse(url) == PostgresURL(url)


def test_the_old_meaning_of_three_slashes_is_refused_when_only_it_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = tmp_path / "old.db"
    old.write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    written = "sqlite:///" + str(old).lstrip("/")
    with pytest.raises(StoreError) as raised:
        sqlite_path(written)
    assert raised.value.code == PortCode.STORE_URL_MOVED
    assert f"'sqlite:///{old}'" in str(raised.value)
    relative = tmp_path / str(old).lstrip("/")  # once the relative file exists, it wins
    relative.parent.mkdir(parents=True)
    relative.write_bytes(b"")
    assert sqlite_path(written) == Path(str(old).lstrip("/"))


SEGMENT = st.text(
    alphabet=st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)),
    min_size=0,
    max_size=12,
).filter(lambda s: s not in (".", ".."))
PATHS = st.builds(
    lambda absolute, parts: ("/" if absolute else "") + "/".join(parts),
    st.booleans(),
    st.lists(
        st.one_of(SEGMENT, st.sampled_from(["with space", "100%", "%2F", "ünïcødé", "日本", ""])),
        min_size=1,
        max_size=5,
    ),
).filter(lambda p: p.strip("/") != "" and not p.endswith("/"))


@given(PATHS)
def test_a_path_round_trips_through_its_url(path: str) -> None:
    """Spaces, `%`, unicode and `//` (an empty segment, a leading `//`) come back as written."""
    url = sqlite_url(path)
    parsed = parse(url)
    assert isinstance(parsed, SqliteURL)
    assert os.fspath(parsed.path) == os.fspath(Path(path))
    if "://" not in path and not path.startswith(("sqlite:", "postgres")):
        assert parse(path) == SqliteURL(Path(path))  # the bare path names the same file


NAMES = st.text(
    alphabet=st.characters(
        blacklist_characters="/\x00", blacklist_categories=("Cs",), max_codepoint=0x2FFF
    ),
    min_size=1,
    max_size=10,
).filter(lambda s: s not in (".", "..") and len(os.fsencode(s)) < 200)


@settings(max_examples=20, deadline=None)
@given(NAMES, st.sampled_from(["", "/", "//"]))
def test_a_store_opens_at_its_url_read_write_and_read_only(
    tmp_path_factory: pytest.TempPathFactory, name: str, doubled: str
) -> None:
    """The same file through `open_store` and the read-only log doctor uses (a `file:` URI,
    where an unquoted `%`, `?`, `#` or a leading `//` would break it)."""
    base = tmp_path_factory.mktemp("urls")
    path = f"{doubled}{base}/{name} %?#.db"
    with open_store(sqlite_url(path)) as store:
        assert store.head().position == 0
    log = ReadOnlyLog(sqlite_path(sqlite_url(path)), immutable=False)
    try:
        assert log.head().position == 0
    finally:
        log.close()
    assert (base / f"{name} %?#.db").is_file()
