"""PostgreSQL names: the schema a store URL picks, and the identifiers rota puts into SQL.

`postgresql://user@host/db?schema=rota` (the `schema` parameter picks the schema, default
`rota`; it is stripped before connecting). Identifiers are validated
(`^[a-z_][a-z0-9_]{0,62}$`), so no name from a URL or a setting can change a statement.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit, urlunsplit

from rota.application.errors import PortCode, StoreError

IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def split_schema(url: str) -> tuple[str, str | None]:
    """The connection URL without its `schema` query parameter (the rest kept verbatim), and it."""
    if "://" not in url:
        return url, None
    parts = urlsplit(url)
    items = [item for item in parts.query.split("&") if item]
    schemas = [unquote(i.partition("=")[2]) for i in items if i.partition("=")[0] == "schema"]
    kept = "&".join(i for i in items if i.partition("=")[0] != "schema")
    return urlunsplit(parts._replace(query=kept)), (schemas[-1] if schemas else None)


def identifier(name: str, what: str = "schema") -> str:
    """`name` if it is a safe SQL identifier (lower-case letters, digits, `_`), else an error."""
    if not IDENTIFIER.fullmatch(name):
        raise StoreError(
            f"{what} name {name!r} is not allowed: use ^[a-z_][a-z0-9_]{{0,62}}$",
            code=PortCode.INVALID_IDENTIFIER,
        )
    return name
