"""AES-256-GCM sealing of personal input fields (`PersonalCipher`), on `cryptography` (the
`rota[signing]` extra), imported only when a personal field is sealed or opened.

Deterministic on purpose (see `rota.application.ports.personal`): the 96-bit nonce is
synthetic, HMAC-SHA256 of the associated data and the plaintext under a nonce key, so two
different values (or contexts) never share a nonce but a value sealed twice gives the same
token. The data key is never used directly: an encryption key and a nonce key are derived
from it (HMAC-SHA256 with distinct labels). Token: standard base64 of nonce || ciphertext
(with GCM's 16-byte tag).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import Any

from rota.application.errors import PortCode
from rota.domain.errors import RotaError

NONCE = 12
KEY_BYTES = 32


def _derive(key: bytes, label: bytes) -> bytes:
    return hmac.new(key, b"rota-personal/" + label, hashlib.sha256).digest()


class AesGcmCipher:
    """`PersonalCipher` over AES-256-GCM with a synthetic nonce (module docstring)."""

    def __init__(self) -> None:
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError:
            raise RotaError(
                "personal input fields are sealed with AES-256-GCM, which needs the "
                "cryptography package: pip install 'rota[signing]'",
                code=PortCode.PERSONAL_UNAVAILABLE,
            ) from None
        self._aead = AESGCM

    def _keys(self, key: bytes) -> tuple[Any, bytes]:
        # Derived on every call, never cached: a forgotten Work's key must not linger here.
        if len(key) != KEY_BYTES:
            raise ValueError("a personal data key is 32 bytes")
        return self._aead(_derive(key, b"encrypt")), _derive(key, b"nonce")

    def seal(self, key: bytes, context: bytes, plaintext: bytes) -> str:
        aead, nonce_key = self._keys(key)
        mac = hmac.new(nonce_key, len(context).to_bytes(4, "big") + context, hashlib.sha256)
        mac.update(plaintext)
        nonce = mac.digest()[:NONCE]
        return base64.b64encode(nonce + aead.encrypt(nonce, plaintext, context)).decode()

    def open(self, key: bytes, context: bytes, token: str) -> bytes:
        from cryptography.exceptions import InvalidTag

        aead, _ = self._keys(key)
        try:
            raw = base64.b64decode(token.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError):
            raise ValueError("a sealed personal value is not base64") from None
        if len(raw) < NONCE + 16:
            raise ValueError("a sealed personal value is too short")
        try:
            plaintext: bytes = aead.decrypt(raw[:NONCE], raw[NONCE:], context)
        except InvalidTag:
            raise ValueError("a sealed personal value does not open under its key") from None
        return plaintext


__all__ = ["AesGcmCipher"]
