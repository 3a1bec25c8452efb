"""The web view's sign-in session, its CSRF tokens and its one-shot notices, all signed with
a key this process draws at start (so a restart signs everyone out).

- The session cookie holds the token's **name** and when it was signed in, with an
  HMAC-SHA256 over both and the token's stored digest: never the token itself. A token
  removed from the token file, or one whose digest changed, ends its sessions; so does age
  (`SESSION_SECONDS`). The cookie is HttpOnly, SameSite=Strict, Path=/ui (Secure on https).
- Every form carries a CSRF token. Signed in, it is a synchronizer token: an HMAC of the
  session cookie, so it is worthless without the cookie and to another session. The
  sign-in form, before any session, uses a double-submit cookie (`rota_signin`): a random
  value in an HttpOnly cookie that the form's hidden field must repeat.
- A notice (what an action did, or why it was refused) rides one redirect in a signed
  cookie and is cleared by the page that shows it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import Response

from rota.http.tokens import Token, TokenFile

PATH = "/ui"
SESSION_COOKIE = "rota_session"
SIGNIN_COOKIE = "rota_signin"
NOTICE_COOKIE = "rota_notice"
SESSION_SECONDS = 8 * 3600


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass(frozen=True)
class Session:
    """A signed-in token (by name, with its scopes) and the CSRF token of its forms."""

    token: Token
    csrf: str

    @property
    def name(self) -> str:
        return self.token.name

    @property
    def operate(self) -> bool:
        return self.token.allows("operate")

    @property
    def admin(self) -> bool:
        return self.token.allows("admin")


@dataclass
class Sessions:
    """Signs and checks the cookies of the web view with a key of this process."""

    tokens: TokenFile
    key: bytes = field(default_factory=lambda: secrets.token_bytes(32))

    def _mac(self, purpose: str, *parts: str) -> str:
        message = "\0".join((purpose, *parts)).encode()
        return _b64(hmac.new(self.key, message, hashlib.sha256).digest())

    # -- the session -------------------------------------------------------------------

    def sign_in(self, presented: str, response: Response, request: Request) -> Token | None:
        """Set the session cookie for the token `presented`, if the token file knows it."""
        token = self.tokens.find(presented)
        if token is None:
            return None
        payload = _b64(json.dumps({"n": token.name, "t": int(time.time())}).encode())
        value = f"{payload}.{self._mac('session', payload, token.sha256)}"
        _set(response, request, SESSION_COOKIE, value, SESSION_SECONDS)
        response.delete_cookie(SIGNIN_COOKIE, path=PATH)
        return token

    def session(self, request: Request) -> Session | None:
        """The request's session, or None (no cookie, a forged or stale one, a gone token)."""
        value = request.cookies.get(SESSION_COOKIE, "")
        payload, _, mac = value.partition(".")
        if not payload or not mac:
            return None
        try:
            data = json.loads(_unb64(payload))
            name, issued = str(data["n"]), int(data["t"])
        except (ValueError, KeyError, TypeError):
            return None
        token = next((t for t in self.tokens.tokens if t.name == name), None)
        if token is None or not hmac.compare_digest(
            mac, self._mac("session", payload, token.sha256)
        ):
            return None
        if not 0 <= time.time() - issued <= SESSION_SECONDS:
            return None
        return Session(token=token, csrf=self._mac("csrf", value))

    @staticmethod
    def sign_out(response: Response) -> None:
        response.delete_cookie(SESSION_COOKIE, path=PATH)

    # -- CSRF --------------------------------------------------------------------------

    @staticmethod
    def csrf_ok(session: Session, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(session.csrf, presented)

    @staticmethod
    def signin_csrf(request: Request) -> str:
        """The sign-in form's double-submit value: the cookie's, or a new one."""
        return request.cookies.get(SIGNIN_COOKIE) or secrets.token_urlsafe(24)

    @staticmethod
    def set_signin_csrf(request: Request, response: Response, value: str) -> None:
        _set(response, request, SIGNIN_COOKIE, value, 3600)

    @staticmethod
    def signin_csrf_ok(request: Request, presented: str | None) -> bool:
        cookie = request.cookies.get(SIGNIN_COOKIE)
        if not cookie or presented is None:
            return False
        return hmac.compare_digest(cookie, presented)

    # -- notices -----------------------------------------------------------------------

    def notify(self, response: Response, request: Request, kind: str, text: str) -> None:
        """Show `text` (`kind`: done or refused) on the page the redirect lands on."""
        payload = _b64(json.dumps({"k": kind, "m": text[:500]}).encode())
        _set(response, request, NOTICE_COOKIE, f"{payload}.{self._mac('notice', payload)}", 60)

    def notice(self, request: Request) -> tuple[str, str] | None:
        payload, _, mac = request.cookies.get(NOTICE_COOKIE, "").partition(".")
        if not payload or not hmac.compare_digest(mac, self._mac("notice", payload)):
            return None
        try:
            data = json.loads(_unb64(payload))
            return str(data["k"]), str(data["m"])
        except (ValueError, KeyError, TypeError):
            return None


def _set(response: Response, request: Request, name: str, value: str, age: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=age,
        path=PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
