"""The security corpus: bad tokens, missing scopes, forged Host headers, oversized and
malformed bodies, wrong media types. Each gets its status and JSON error code, and the
log is unchanged (its head compared before and after)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from http_api.conftest import Api
from rota.domain.errors import RotaError
from rota.http.tokens import TokenFile, digest

SUBMIT = {"work": "corpus", "binding": "echo", "input": {"n": 1}}
KEY = {"Idempotency-Key": "corpus-1"}


def raw(api: Api, method: str, path: str, **kwargs: object) -> httpx.Response:
    with httpx.Client(base_url=api.url, timeout=30) as client:
        return client.request(method, path, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def unchanged(api: Api) -> Iterator[None]:
    before = api.head()
    yield
    assert api.head() == before, "a refused request changed the log"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **KEY}


BAD_TOKENS = [
    ({}, "no header"),
    ({"Authorization": "Bearer"}, "scheme only"),
    ({"Authorization": "Bearer rota_"}, "prefix only"),
    ({"Authorization": "Basic dXNlcjpwYXNz"}, "another scheme"),
    ({"Authorization": "Bearer rota_" + "x" * 43}, "well-formed, unknown"),
    ({"Authorization": "Bearer " + "y" * 4000}, "very long"),
    ({"Authorization": "bearer rota_nope"}, "lower-case scheme, unknown token"),
]


@pytest.mark.parametrize(("headers", "why"), BAD_TOKENS, ids=[w for _, w in BAD_TOKENS])
@pytest.mark.parametrize(("method", "path"), [("GET", "/v1/works"), ("POST", "/v1/works")])
def test_bad_tokens_are_401_unauthorized(
    api: Api, unchanged: None, headers: dict[str, str], why: str, method: str, path: str
) -> None:
    answer = raw(api, method, path, headers={**headers, **KEY}, json=SUBMIT)
    assert answer.status_code == 401, (why, answer.text)
    assert answer.json()["error"]["code"] == "unauthorized"


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/v1/openapi.json"])
def test_no_token_no_access_even_on_loopback(api: Api, path: str) -> None:
    answer = raw(api, "GET", path)
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "unauthorized"


def test_a_token_with_the_right_scope_is_let_in_the_wrong_token_is_not(api: Api) -> None:
    assert raw(api, "GET", "/v1/works", headers=bearer(api.tokens["read"])).status_code == 200
    other = api.tokens["read"][:-1] + ("A" if api.tokens["read"][-1] != "A" else "B")
    assert raw(api, "GET", "/v1/works", headers=bearer(other)).status_code == 401


MISSING_SCOPES = [
    ("read", "POST", "/v1/works", SUBMIT),
    ("read", "POST", "/v1/work/corpus/cancel", {}),
    ("read", "POST", "/v1/work/corpus/inject", {"input": 1}),
    ("operate", "POST", "/v1/work/corpus/settle-gate", {"registration": "g", "admit": True}),
]


@pytest.mark.parametrize(("scope", "method", "path", "body"), MISSING_SCOPES)
def test_missing_scopes_are_403(
    api: Api, unchanged: None, scope: str, method: str, path: str, body: object
) -> None:
    answer = raw(api, method, path, headers=bearer(api.tokens[scope]), json=body)
    assert answer.status_code == 403, answer.text
    assert answer.json()["error"]["code"] == "missing_scope"


FORGED_HOSTS = [
    "evil.example",
    "evil.example:8470",
    "127.0.0.1.evil.example",
    "[::2]:80",
    "",
    # the whole host[:port] is compared, with a strict grammar
    "[::1].evil.com",
    "localhost:1@evil.com",
    "localhost.evil.com",
    "localhost:99999",
    "localhost:80x",
    "localhost:",
    "[::1]x",
    "localhost/evil",
]


@pytest.mark.parametrize("host", FORGED_HOSTS)
@pytest.mark.parametrize("method", ["GET", "POST"])
def test_forged_host_headers_are_400_host_not_allowed(
    api: Api, unchanged: None, host: str, method: str
) -> None:
    headers = {**bearer(api.tokens["admin"]), "Host": host}
    answer = raw(api, method, "/v1/works", headers=headers, json=SUBMIT)
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "host_not_allowed"


@pytest.mark.parametrize("host", ["localhost", "localhost:1", "127.0.0.1", "[::1]:8470"])
def test_loopback_host_names_are_allowed(api: Api, host: str) -> None:
    headers = {**bearer(api.tokens["read"]), "Host": host}
    assert raw(api, "GET", "/v1/works", headers=headers).status_code == 200


def test_an_oversized_body_is_413_by_length_and_by_counting(api: Api, unchanged: None) -> None:
    limit = api.context.settings.max_body_bytes
    big = b'{"work": "corpus", "binding": "echo", "input": "' + b"x" * limit + b'"}'
    headers = {**bearer(api.tokens["operate"]), "Content-Type": "application/json"}
    answer = raw(api, "POST", "/v1/works", headers=headers, content=big)
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "body_too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked, counted as it arrives
        for i in range(0, len(big), 65536):
            yield big[i : i + 65536]

    answer = raw(api, "POST", "/v1/works", headers=headers, content=chunks())
    assert answer.status_code == 413
    assert answer.json()["error"]["code"] == "body_too_large"


MALFORMED = [b"{", b"not json", b'{"work": "corpus",}', b"\xff\xfe", b"[1, 2", b'{"a": NaN']


@pytest.mark.parametrize("body", MALFORMED)
def test_malformed_bodies_are_400_malformed_body(api: Api, unchanged: None, body: bytes) -> None:
    headers = {**bearer(api.tokens["operate"]), "Content-Type": "application/json"}
    answer = raw(api, "POST", "/v1/works", headers=headers, content=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "malformed_body"


INVALID = [
    {"binding": "echo"},  # no work
    {"work": "bad id!", "binding": "echo"},
    {"work": "w", "binding": "echo", "kind": "forever"},
    {"work": "w", "binding": "echo", "surprise": 1},  # unknown field
    [1, 2, 3],
]


@pytest.mark.parametrize("body", INVALID)
def test_invalid_bodies_are_422_invalid_request(api: Api, unchanged: None, body: object) -> None:
    answer = raw(api, "POST", "/v1/works", headers=bearer(api.tokens["operate"]), json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "invalid_request"


@pytest.mark.parametrize(
    "content_type", [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data"]
)
def test_mutations_are_json_only_415(api: Api, unchanged: None, content_type: str | None) -> None:
    headers = bearer(api.tokens["operate"])
    if content_type is not None:
        headers["Content-Type"] = content_type
    answer = raw(api, "POST", "/v1/works", headers=headers, content=b'{"work": "corpus"}')
    assert answer.status_code == 415
    assert answer.json()["error"]["code"] == "unsupported_media_type"


def test_a_mutation_without_an_idempotency_key_is_400(api: Api, unchanged: None) -> None:
    headers = {"Authorization": f"Bearer {api.tokens['operate']}"}
    answer = raw(api, "POST", "/v1/works", headers=headers, json=SUBMIT)
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "idempotency_key_required"
    bad = raw(api, "POST", "/v1/works", headers={**headers, "Idempotency-Key": "a b"}, json=SUBMIT)
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_request"


def test_no_cors_header_is_ever_sent(api: Api) -> None:
    origin = {"Origin": "https://evil.example"}
    preflight = raw(
        api,
        "OPTIONS",
        "/v1/works",
        headers={**origin, "Access-Control-Request-Method": "POST"},
    )
    got = raw(api, "GET", "/v1/works", headers={**origin, **bearer(api.tokens["read"])})
    for answer in (preflight, got):
        assert not [h for h in answer.headers if h.lower().startswith("access-control-")]
    assert preflight.status_code in (401, 405)


def test_unknown_routes_and_methods_answer_json(api: Api) -> None:
    headers = bearer(api.tokens["read"])
    nowhere = raw(api, "GET", "/v1/nowhere", headers=headers)
    assert nowhere.status_code == 404 and nowhere.json()["error"]["code"] == "route_not_found"
    wrong = raw(api, "DELETE", "/v1/works", headers={**headers, "Content-Type": "application/json"})
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"


def test_a_mutation_refused_by_the_domain_is_409_with_its_code(idle_api: Api) -> None:
    """Without a running loop: the loop's own appends (a claim) would move the head."""
    idle_api.scheduler.submit("done", binding="echo")
    idle_api.scheduler.cancel("done")
    before = idle_api.head()
    answer = raw(
        idle_api, "POST", "/v1/work/done/retry", headers=bearer(idle_api.tokens["operate"]), json={}
    )
    assert answer.status_code == 409
    assert answer.json()["error"]["code"] in ("work_terminal", "nothing_to_retry")
    assert idle_api.head() == before


# -- the token file ---------------------------------------------------------------------


def test_the_token_file_stores_digests_and_must_be_0600(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    tokens = TokenFile.load(path, missing_ok=True)
    token = tokens.add("ci", frozenset(["read"]))
    text = path.read_text()
    assert token not in text and digest(token) in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert TokenFile.load(path).find(token) is not None
    assert TokenFile.load(path).find(token + "x") is None
    os.chmod(path, 0o640)
    with pytest.raises(RotaError) as refused:
        TokenFile.load(path)
    assert refused.value.code == "token_file_invalid"
    assert "0640" in str(refused.value)


@pytest.mark.parametrize(
    "content",
    ['{"tokens": []}', "[]", '{"rota_tokens": 1, "tokens": [{"name": "x"}]}', "nope"],
)
def test_a_token_file_that_is_not_one_is_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "t.json"
    path.write_text(content)
    path.chmod(0o600)
    with pytest.raises(RotaError) as refused:
        TokenFile.load(path)
    assert refused.value.code == "token_file_invalid"


def test_scopes_nest_admin_operate_read(tmp_path: Path) -> None:
    tokens = TokenFile.load(tmp_path / "t.json", missing_ok=True)
    made = {s: tokens.add(s, frozenset([s])) for s in ("read", "operate", "admin")}  # type: ignore[misc]
    allowed = {
        name: [need for need in ("read", "operate", "admin") if tokens.find(t).allows(need)]  # type: ignore[union-attr, arg-type]
        for name, t in made.items()
    }
    assert allowed == {
        "read": ["read"],
        "operate": ["read", "operate"],
        "admin": ["read", "operate", "admin"],
    }


# The web view's only routes open without a session: its stylesheet, the sign-in form and
# the redirect of /ui to /ui/; signing in needs the form's CSRF cookie, signing out nothing.
PUBLIC_UI = {("GET", "/ui"), ("GET", "/ui/static/web.css"), ("GET", "/ui/sign-in")}


def test_every_route_needs_a_token_or_a_session(api: Api, unchanged: None) -> None:
    """Every route of the app, API and web view, asked without credentials: the API answers
    401 `unauthorized`; a page redirects to sign-in, a form is `sign_in_required` (or, for
    sign-in itself, `csrf_invalid`). Only PUBLIC_UI is open, deliberately."""
    from http_api.test_openapi import app_routes
    from rota.http.app import create_app

    routes = [
        (method, route.path)
        for route in app_routes(create_app(api.context))
        for method in sorted(route.methods)
    ]
    assert any(p.startswith("/ui/schedules") for _, p in routes)
    for method, path in routes:
        concrete = path.replace("{work_id}", "corpus").replace("{name}", "corpus")
        kwargs: dict[str, object] = {"headers": {**KEY}}
        if method == "POST" and path.startswith("/ui"):
            kwargs["data"] = {"csrf": "x"}
        elif method == "POST":
            kwargs["json"] = {}
        answer = raw(api, method, concrete, follow_redirects=False, **kwargs)
        if (method, path) in PUBLIC_UI:
            assert answer.status_code in (200, 303), (method, path, answer.status_code)
        elif not path.startswith("/ui"):
            assert answer.status_code == 401, (method, path, answer.text)
            assert answer.json()["error"]["code"] == "unauthorized"
        elif method == "GET":
            assert answer.status_code == 303, (method, path, answer.status_code)
            assert answer.headers["location"].startswith("/ui/sign-in")
        elif path == "/ui/sign-out":
            assert answer.status_code == 303  # without a session: nothing to end
        else:
            assert answer.status_code in (401, 403), (method, path, answer.status_code)
            assert b"sign_in_required" in answer.content or b"csrf_invalid" in answer.content


NOSNIFF_CASES = [
    ("GET", "/v1/works", "read", None, 200),
    ("GET", "/v1/works/nope", "read", None, 404),
    ("GET", "/v1/nowhere", "read", None, 404),
    ("GET", "/v1/works", None, None, 401),
    ("POST", "/v1/works", "operate", None, 200),
    ("GET", "/v1/works", "read", "evil.example", 400),
    ("GET", "/healthz", "read", None, 200),
]


@pytest.mark.parametrize(("method", "path", "scope", "host", "status"), NOSNIFF_CASES)
def test_every_answer_carries_nosniff(
    api: Api, method: str, path: str, scope: str | None, host: str | None, status: int
) -> None:
    headers = dict(KEY)
    if scope is not None:
        headers["Authorization"] = f"Bearer {api.tokens[scope]}"
    if host is not None:
        headers["Host"] = host
    body = SUBMIT if method == "POST" else None
    answer = raw(api, method, path, headers=headers, json=body)
    assert answer.status_code == status, answer.text
    assert answer.headers["x-content-type-options"] == "nosniff"


SURROGATE_BODIES = [
    ("/v1/works", b'{"work": "s1", "binding": "echo", "input": {"n": "\\ud800"}}'),
    ("/v1/works", b'{"work": "s1", "binding": "echo", "input": ["a", {"\\uDFFF": 1}]}'),
    ("/v1/works", b'{"work": "s\\ud800", "binding": "echo"}'),
    ("/v1/works", b'{"work": "s1", "binding": "echo\\udc00"}'),
    ("/v1/work/corpus/cancel", b'{"reason": "x\\ud800"}'),
]


@pytest.mark.parametrize(("path", "body"), SURROGATE_BODIES)
def test_a_lone_surrogate_anywhere_in_a_body_is_422_not_json(
    api: Api, unchanged: None, path: str, body: bytes
) -> None:
    headers = {**bearer(api.tokens["operate"]), "Content-Type": "application/json"}
    answer = raw(api, "POST", path, headers=headers, content=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "not_json"
    assert answer.headers["x-content-type-options"] == "nosniff"


def test_a_surrogate_pair_escaped_is_one_character_and_accepted(api: Api) -> None:
    headers = {**bearer(api.tokens["operate"]), "Content-Type": "application/json"}
    body = b'{"work": "s2", "binding": "echo", "input": {"n": "\\ud83d\\ude00"}}'
    answer = raw(api, "POST", "/v1/works", headers=headers, content=body)
    assert answer.status_code == 200, answer.text


NEWLINE_BODIES = [
    ("POST", "/v1/works", {"work": "nl\n", "binding": "echo"}),
    ("POST", "/v1/works", {"work": "nl", "binding": "echo\n"}),
    ("POST", "/v1/works", {"work": "nl", "binding": "echo", "scope": "root\n"}),
    ("POST", "/v1/schedules/tick%0A/pause", {}),
    ("POST", "/v1/work/corpus%0A/cancel", {}),
]


@pytest.mark.parametrize(("method", "path", "body"), NEWLINE_BODIES)
def test_a_trailing_newline_in_an_id_or_name_is_422(
    api: Api, unchanged: None, method: str, path: str, body: object
) -> None:
    answer = raw(api, method, path, headers=bearer(api.tokens["admin"]), json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] in ("invalid_request", "invalid_work", "invalid_scope")
