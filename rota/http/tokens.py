"""The API's bearer tokens: a JSON file of names, scopes and SHA-256 digests (never tokens).

```json
{"rota_tokens": 1, "tokens": [{"name": "ci", "scopes": ["read"], "sha256": "9f2c..."}]}
```

The file must be mode 0600 (no group or other bits) and is refused otherwise. A token is
`rota_` and 43 URL-safe characters from `secrets` (256 bits), shown once by `rota token add`;
only its digest is stored. A presented token is hashed and compared with every stored
digest in constant time (`hmac.compare_digest`, no early exit), so neither timing nor the
file gives a token away. Scopes nest: `admin` includes `operate`, which includes `read`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from rota.domain.errors import RotaError
from rota.http.errors import HttpCode

Scope = Literal["read", "operate", "admin"]
SCOPES: tuple[Scope, ...] = get_args(Scope)
TOKEN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
FORMAT = 1


class TokenFileError(RotaError):
    code = HttpCode.TOKEN_FILE_INVALID


@dataclass(frozen=True)
class Token:
    """A stored token: its name (the actor its mutations record), scopes and digest."""

    name: str
    scopes: frozenset[Scope]
    sha256: str

    def allows(self, needed: Scope) -> bool:
        """Whether this token may use a route needing `needed` (admin > operate > read)."""
        return any(SCOPES.index(s) >= SCOPES.index(needed) for s in self.scopes)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def new_token() -> str:
    return "rota_" + secrets.token_urlsafe(32)


class TokenFile:
    """The tokens of one file, loaded once (`load`), looked up in constant time."""

    def __init__(self, path: Path, tokens: tuple[Token, ...] = ()) -> None:
        self.path = path
        self.tokens = tokens

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, missing_ok: bool = False) -> TokenFile:
        """Read `path`; a missing file is refused unless `missing_ok` (then: no tokens)."""
        file = Path(path)
        try:
            mode = file.stat().st_mode
        except FileNotFoundError:
            if missing_ok:
                return cls(file)
            raise TokenFileError(
                f"token file {file} does not exist: create a token with `rota token add`"
            ) from None
        except OSError as exc:
            raise TokenFileError(f"token file {file}: cannot read: {exc.strerror}") from None
        if stat.S_IMODE(mode) & 0o077:
            raise TokenFileError(
                f"token file {file} is mode {stat.S_IMODE(mode):04o}: it must be 0600 "
                f"(chmod 600 {file})"
            )
        try:
            data = json.loads(file.read_bytes())
        except (OSError, ValueError) as exc:
            raise TokenFileError(f"token file {file} is not valid JSON: {exc}") from None
        return cls(file, _parse(data, file))

    def find(self, presented: str) -> Token | None:
        """The token whose digest matches `presented`, comparing with every entry."""
        wanted = digest(presented).encode()
        found: Token | None = None
        for token in self.tokens:
            if hmac.compare_digest(wanted, token.sha256.encode()):
                found = token
        return found

    def add(self, name: str, scopes: frozenset[Scope]) -> str:
        """Add a token named `name` and save the file (0600); returns the token, once."""
        if not TOKEN_NAME.fullmatch(name):
            raise TokenFileError(f"token name {name!r} must match {TOKEN_NAME.pattern}")
        if any(t.name == name for t in self.tokens):
            raise RotaError(f"a token named {name!r} exists", code=HttpCode.TOKEN_EXISTS)
        token = new_token()
        self.tokens = (*self.tokens, Token(name, scopes, digest(token)))
        self.save()
        return token

    def remove(self, name: str) -> None:
        if not any(t.name == name for t in self.tokens):
            raise RotaError(f"no token named {name!r}", code=HttpCode.UNKNOWN_TOKEN)
        self.tokens = tuple(t for t in self.tokens if t.name != name)
        self.save()

    def save(self) -> None:
        """Write the file atomically, created 0600 (never readable by others in between)."""
        body = {
            "rota_tokens": FORMAT,
            "tokens": [
                {"name": t.name, "scopes": sorted(t.scopes, key=SCOPES.index), "sha256": t.sha256}
                for t in self.tokens
            ],
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(self.path.name + ".tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, (json.dumps(body, indent=2) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, self.path)


def _parse(data: object, file: Path) -> tuple[Token, ...]:
    if not isinstance(data, dict) or data.get("rota_tokens") != FORMAT:
        raise TokenFileError(f"token file {file} is not a rota token file (rota_tokens: 1)")
    entries = data.get("tokens")
    if not isinstance(entries, list):
        raise TokenFileError(f"token file {file}: tokens is not a list")
    tokens = []
    for i, entry in enumerate(entries):
        where = f"token file {file}: tokens[{i}]"
        if not isinstance(entry, dict):
            raise TokenFileError(f"{where} is not an object")
        name, scopes, sha = entry.get("name"), entry.get("scopes"), entry.get("sha256")
        if not isinstance(name, str) or not TOKEN_NAME.fullmatch(name):
            raise TokenFileError(f"{where}.name must match {TOKEN_NAME.pattern}")
        if not isinstance(scopes, list) or not scopes or any(s not in SCOPES for s in scopes):
            raise TokenFileError(f"{where}.scopes must be a non-empty list of {list(SCOPES)}")
        if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise TokenFileError(f"{where}.sha256 must be 64 lower-case hex digits")
        tokens.append(Token(name, frozenset(scopes), sha))
    return tuple(tokens)
