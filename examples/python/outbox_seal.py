"""fenced-outbox's encryption at rest for producers over the SQL API (docs/security.md).

With a key configured, a producer stores an op's body, and each header value, sealed: the
dispatcher opens them right before sending, with the key the envelope names, and nothing else
ever reads them in clear. The envelope, the same in every language:

    b"OBX1" | key id length (1 byte) | key id | nonce (12 bytes) | AES-256-GCM ciphertext and tag

A header value is stored as "obx1:" and the envelope in base64 (no padding). The associated data
binds the ciphertext to its place: b"outbox/v1\\0" + field + b"\\0" + destination, the field
being "body" or "header:" and the header name in lower case. The nonce is the first 12 bytes of
HMAC-SHA-256(HMAC-SHA-256(key, b"outbox/v1 nonce"), associated data + b"\\0" + plaintext): the
same request sealed twice is the same envelope, so outbox.enqueue, which hashes what it is given,
still finds a rerun to be a duplicate (under the same key).

Keys are 32 random bytes in base64, in a file or an environment variable
(head -c 32 /dev/urandom | base64), named by an id of 1-64 of [A-Za-z0-9._-]; the dispatcher's
[encryption] keys must hold the same id and key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

MAGIC = b"OBX1"
HEADER_PREFIX = "obx1:"
_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


def _associated_data(field: str, destination: str) -> bytes:
    return b"outbox/v1\0" + field.encode() + b"\0" + destination.encode()


class Key:
    """One key: its id and its 32 bytes. Never printed."""

    def __init__(self, key_id: str, secret: bytes) -> None:
        if not _KEY_ID.fullmatch(key_id):
            raise ValueError(f"key id {key_id!r}: use 1 to 64 of A-Z, a-z, 0-9, '.', '_' and '-'")
        if len(secret) != 32:
            raise ValueError(f"key {key_id}: decodes to {len(secret)} bytes; a key is 32")
        self.id = key_id
        self._aead = AESGCM(secret)
        self._nonce_key = hmac.new(secret, b"outbox/v1 nonce", hashlib.sha256).digest()

    def __repr__(self) -> str:
        return f"Key({self.id!r})"

    @classmethod
    def load(cls, spec: str) -> "Key":
        """A key from "ID=file:/path" or "ID=env:NAME" (its base64 text, whitespace ignored)."""
        key_id, _, source = spec.partition("=")
        if source.startswith("file:"):
            with open(source[len("file:"):], encoding="ascii") as f:
                text = f.read()
        elif source.startswith("env:"):
            text = os.environ.get(source[len("env:"):])
            if text is None:
                raise ValueError(f"key {key_id}: the environment variable {source[4:]} is not set")
        else:
            raise ValueError(f"key {key_id}: expected ID=file:/path or ID=env:NAME")
        return cls(key_id.strip(), base64.b64decode(text.strip() + "=" * (-len(text.strip()) % 4)))

    def seal_body(self, destination: str, body: bytes) -> bytes:
        """The body as stored: sealed, or empty when empty (nothing to hide)."""
        return self._seal(_associated_data("body", destination), body) if body else b""

    def seal_header(self, destination: str, name: str, value: str) -> str:
        """A header value as stored: "obx1:" and its envelope in base64, or empty when empty."""
        if not value:
            return ""
        envelope = self._seal(_associated_data("header:" + name.lower(), destination), value.encode())
        return HEADER_PREFIX + base64.b64encode(envelope).decode().rstrip("=")

    def _seal(self, aad: bytes, plaintext: bytes) -> bytes:
        nonce = hmac.new(self._nonce_key, aad + b"\0" + plaintext, hashlib.sha256).digest()[:12]
        key_id = self.id.encode()
        return MAGIC + bytes([len(key_id)]) + key_id + nonce + self._aead.encrypt(nonce, plaintext, aad)
