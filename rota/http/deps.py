"""The routes' dependencies: the `ApiContext`, and the bearer token with the scope a route
needs (`Depends(scope("operate"))`), checked before the route runs."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from rota.http.context import ApiContext
from rota.http.errors import ApiError, HttpCode
from rota.http.tokens import Scope, Token

bearer = HTTPBearer(auto_error=False, description="a token made by `rota token add`")


def context(request: Request) -> ApiContext:
    state: ApiContext = request.app.state.rota
    return state


def scope(needed: Scope) -> Callable[..., Token]:
    """A dependency answering 401 without a known token and 403 without `needed`."""

    def authorised(
        request: Request,
        credentials: HTTPAuthorizationCredentials | None = Security(bearer),  # noqa: B008
    ) -> Token:
        if credentials is None or credentials.scheme.lower() != "bearer":
            raise ApiError(
                "send Authorization: Bearer <token>", code=HttpCode.UNAUTHORIZED, status=401
            )
        token = context(request).tokens.find(credentials.credentials)
        if token is None:
            raise ApiError("the bearer token is not known", code=HttpCode.UNAUTHORIZED, status=401)
        if not token.allows(needed):
            raise ApiError(
                f"token {token.name!r} lacks the {needed} scope",
                code=HttpCode.MISSING_SCOPE,
                status=403,
            )
        return token

    return authorised


READ = Depends(scope("read"))
OPERATE = Depends(scope("operate"))
ADMIN = Depends(scope("admin"))
