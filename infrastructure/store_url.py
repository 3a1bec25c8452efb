"""The one parser of store URLs: every component that is given a store URL calls `parse`.

The convention is SQLAlchemy's (and DBOS's), the one Python users know:

- `sqlite:///relative/path`: three slashes, a path relative to the working directory;
- `sqlite:////absolute/path`: four slashes, an absolute path;
- a bare path (`rota.db`, `/var/lib/rota/rota.db`), also `sqlite:path`;
- `postgresql://user@host:5432/db?schema=name` (or `postgres://`);
- `memory://name`: a store kept in this process's memory, shared by every handle opened on
  that name; `memory://` alone: a fresh private one (`rota.infrastructure.memory`).

`backend(url)` is how the rest of rota gets from a URL to the store package that serves
it: the one place that asks which kind of store a URL names (`rota.infrastructure.backend`).

The path after `sqlite:///` is taken exactly as written: no percent-decoding, no query
string, so a path with spaces, `%`, `?`, `#` or unicode round-trips (`sqlite_url`).
`sqlite://`, `sqlite://:memory:` and an empty path name no file and are refused, as is
`sqlite://host/...` (an authority: SQLite has no hosts).

Earlier versions of rota read `sqlite:///var/lib/rota.db` as the ABSOLUTE path: that URL now
means `var/lib/rota.db` under the working directory. `SqliteURL.old_meaning` is the file it
used to name, so `sqlite_path` refuses loudly (`store_url_moved`) when only that file exists.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rota.application.errors import PortCode, StoreError

if TYPE_CHECKING:
    from rota.infrastructure.backend import Backend

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
MEMORY_SCHEME = "memory://"


@dataclass(frozen=True)
class SqliteURL:
    """An SQLite store: its file, and the file the URL named before the convention changed."""

    path: Path
    old_meaning: Path | None = None


@dataclass(frozen=True)
class PostgresURL:
    """A PostgreSQL store: the URL as given (its `schema` parameter picks the schema)."""

    url: str


@dataclass(frozen=True)
class MemoryURL:
    """An in-memory store: its name ("" for a fresh private one)."""

    url: str

    @property
    def name(self) -> str:
        return self.url[len(MEMORY_SCHEME) :]


def parse(url: str | os.PathLike[str]) -> SqliteURL | PostgresURL | MemoryURL:
    """What a store URL (or a bare path) names; `invalid_store_url` if nothing sensible."""
    text = os.fspath(url)
    if text.startswith(POSTGRES_SCHEMES):
        return PostgresURL(text)
    if text.startswith(MEMORY_SCHEME):
        if "/" in text[len(MEMORY_SCHEME) :] or "?" in text:
            raise StoreError(
                f"store URL {redact_url(text)!r}: an in-memory store is memory://NAME "
                "(letters, digits, '-', '_', '.') or memory:// alone",
                code=PortCode.INVALID_STORE_URL,
            )
        return MemoryURL(text)
    if text.startswith("sqlite://"):
        rest = text[len("sqlite://") :]
        if rest in ("", ":memory:", "/:memory:"):
            raise _no_file(text)
        if not rest.startswith("/"):
            raise StoreError(
                f"store URL {redact_url(text)!r} names a host, and SQLite has none: write "
                "sqlite:///relative/path (three slashes) or sqlite:////absolute/path (four)",
                code=PortCode.INVALID_STORE_URL,
            )
        path = rest[1:]
        if not path:
            raise _no_file(text)
        old = None if path.startswith("/") else Path("/" + path)
        return SqliteURL(Path(path), old)
    if text.startswith("sqlite:"):
        path = text[len("sqlite:") :]
    elif "://" in text:
        scheme = text.split("://", 1)[0]
        raise StoreError(
            f"store URL {text.split('://', 1)[0]}://...: unknown scheme {scheme!r}; use "
            "sqlite:///relative/path, sqlite:////absolute/path, a file path, postgresql:// "
            "or memory://",
            code=PortCode.INVALID_STORE_URL,
        )
    else:
        path = text
    if not path or path == ":memory:":
        raise _no_file(text)
    return SqliteURL(Path(path))


def backend(url: str | os.PathLike[str]) -> Backend:
    """The backend object of the store package `url` names (see `parse`): SQLite's,
    PostgreSQL's (`missing_extra` without psycopg) or the in-memory one."""
    parsed = parse(url)
    if isinstance(parsed, PostgresURL):
        require_postgres_extra()
        from rota.infrastructure.postgres.backend import PostgresBackend

        return PostgresBackend(parsed.url)
    if isinstance(parsed, MemoryURL):
        from rota.infrastructure.memory.backend import MemoryBackend

        return MemoryBackend(parsed.url)
    from rota.infrastructure.sqlite.backend import SQLiteBackend

    return SQLiteBackend(os.fspath(url))


def require_postgres_extra() -> None:
    """Refuse a postgresql:// store, with what to install, when psycopg is not installed."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        raise StoreError(
            "a postgresql:// store needs PostgreSQL support: install 'rota[postgresql]'",
            code=PortCode.MISSING_EXTRA,
        ) from None


def sqlite_url(path: str | os.PathLike[str]) -> str:
    """The `sqlite:` URL of a file: `sqlite:///` + the path as written (so an absolute path
    gets four slashes); `parse` gives the path back."""
    return "sqlite:///" + os.fspath(path)


def store_not_found(where: str) -> StoreError:
    """No rota store at `where`: reading never creates one."""
    return StoreError(
        f"no rota store at {where}: commands that only read never create one "
        "(check --store, ROTA_STORE or [store] url; submit, run and import create a store)",
        code=PortCode.STORE_NOT_FOUND,
    )


def _no_file(url: str) -> StoreError:
    return StoreError(
        f"store URL {redact_url(url)!r} names no file: rota's SQLite store needs a file path "
        "(an in-memory database cannot be shared by the scheduler's connections)",
        code=PortCode.INVALID_STORE_URL,
    )


def redact_url(url: str) -> str:
    """The URL as it may be shown (errors, logs, output): any password replaced by `***`.

    A store URL may carry credentials (`postgresql://user:password@host/db`, or
    `?password=...`); only the process that connects needs them. Everything else is kept
    exactly as written.
    """
    shown = _PASSWORD_PARAM.sub(r"\1***", url)
    scheme, sep, rest = shown.partition("://")
    if not sep:
        return shown
    authority, tail = re.match(r"([^/?#]*)(.*)", rest, re.DOTALL).groups()  # type: ignore[union-attr]
    userinfo, at, host = authority.rpartition("@")
    if at and ":" in userinfo:
        authority = f"{userinfo.split(':', 1)[0]}:***@{host}"
    return f"{scheme}://{authority}{tail}"


_PASSWORD_PARAM = re.compile(r"([?&](?:password|sslpassword)=)[^&#]*", re.IGNORECASE)
