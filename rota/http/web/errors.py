"""The web view's own error codes (`WebCode`): its sign-in session and its forms' CSRF
check. Its other refusals reuse the API's codes (`missing_scope`, `serve_read_only`,
`unsupported_media_type`) and the commands' own (`not_held`, `work_terminal` ...).
Imports nothing of the `rota[http]` extra, so `rota.codes` can list the codes without it."""

from __future__ import annotations

from rota.domain.errors import ErrorCode


class WebCode(ErrorCode):
    """The web view's codes: its session and the CSRF check of its forms."""

    SIGN_IN_REQUIRED = "sign_in_required"
    """A web view action without a session, or with an expired one (401): sign in again."""
    SIGN_IN_FAILED = "sign_in_failed"
    """The web view's sign-in form was given a token the token file does not know (401)."""
    CSRF_INVALID = "csrf_invalid"
    """A web view form without its CSRF token, with another session's, or sent from another
    origin (403): reload the page and submit it again. Nothing was done."""
