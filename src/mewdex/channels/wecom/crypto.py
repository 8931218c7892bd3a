"""WeCom's callback encryption (``WXBizMsgCrypt``, 企业微信 加解密方案, developer doc path/90968).

* ``key = base64decode(EncodingAESKey + "=")`` (43 characters → 32 bytes); AES-256-CBC with
  ``IV = key[:16]``; PKCS#7 padding to 32-byte blocks (not AES's 16).
* Plaintext layout: ``16 random bytes ‖ len(msg) (4 bytes, big-endian) ‖ msg ‖ receive_id``;
  ``receive_id`` is the corp id for a self-built app (``""`` for the intelligent robot).
* ``msg_signature = sha1("".join(sorted([token, timestamp, nonce, encrypt]))).hexdigest()``.

:class:`WXBizMsgCrypt` signs, encrypts and decrypts; :meth:`~WXBizMsgCrypt.verify_url` answers the
callback URL check (``GET ?msg_signature&timestamp&nonce&echostr``) and
:meth:`~WXBizMsgCrypt.decrypt_message` opens a callback ``POST`` (``<xml><Encrypt>…``). Errors are
:class:`WeComCryptoError` with ``code`` ``wecom_signature_invalid``, ``wecom_decrypt_failed`` or
``wecom_receive_id_mismatch``; messages never carry the key or the plaintext.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import struct
import xml.etree.ElementTree as ET

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

BLOCK = 32


class WeComCryptoError(Exception):
    """A callback that cannot be trusted or read (``code``, see the module doc)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def signature(token: str, timestamp: str, nonce: str, encrypt: str) -> str:
    """``msg_signature``: hex SHA-1 of the four strings sorted and concatenated."""
    return hashlib.sha1("".join(sorted([token, str(timestamp), str(nonce), encrypt])).encode()).hexdigest()


def decode_aes_key(encoding_aes_key: str) -> bytes:
    """The 32-byte AES key of a 43-character EncodingAESKey; raises :class:`WeComCryptoError`."""
    try:
        key = base64.b64decode(encoding_aes_key + "=", validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(encoding_aes_key) != 43 or len(key) != 32:
        raise WeComCryptoError("wecom_aes_key_invalid", "the EncodingAESKey must be 43 characters of base64")
    return key


def _pad(data: bytes) -> bytes:
    n = BLOCK - len(data) % BLOCK
    return data + bytes([n]) * n


def _unpad(data: bytes) -> bytes:
    n = data[-1] if data else 0
    if not 1 <= n <= BLOCK or len(data) < n:
        raise WeComCryptoError("wecom_decrypt_failed", "the callback's padding is not valid")
    return data[:-n]


class WXBizMsgCrypt:
    """The crypto of one WeCom app: ``token`` and ``encoding_aes_key`` from the app's "接收消息"
    settings, ``receive_id`` the corp id (``""`` for the intelligent robot)."""

    def __init__(self, token: str, encoding_aes_key: str, receive_id: str):
        self.token = token
        self.key = decode_aes_key(encoding_aes_key)
        self.receive_id = receive_id

    def _cipher(self) -> Cipher:
        return Cipher(algorithms.AES(self.key), modes.CBC(self.key[:16]))

    def encrypt(self, message: str | bytes, random16: bytes | None = None) -> str:
        """The base64 ciphertext of ``message`` (``random16``: fixed prefix for tests)."""
        body = message.encode() if isinstance(message, str) else message
        prefix = random16 if random16 is not None else os.urandom(16)
        plain = _pad(prefix + struct.pack(">I", len(body)) + body + self.receive_id.encode())
        encryptor = self._cipher().encryptor()
        return base64.b64encode(encryptor.update(plain) + encryptor.finalize()).decode()

    def decrypt(self, encrypt: str) -> bytes:
        """The message inside a ciphertext, after checking its receive id."""
        try:
            raw = base64.b64decode(encrypt, validate=True)
        except (binascii.Error, ValueError):
            raise WeComCryptoError("wecom_decrypt_failed", "the callback's ciphertext is not base64") from None
        if not raw or len(raw) % 16:
            raise WeComCryptoError("wecom_decrypt_failed", "the callback's ciphertext has a wrong length")
        decryptor = self._cipher().decryptor()
        plain = _unpad(decryptor.update(raw) + decryptor.finalize())
        if len(plain) < 20:
            raise WeComCryptoError("wecom_decrypt_failed", "the callback's plaintext is too short")
        (length,) = struct.unpack(">I", plain[16:20])
        if 20 + length > len(plain):
            raise WeComCryptoError("wecom_decrypt_failed", "the callback's length field is not valid")
        message, receive_id = plain[20 : 20 + length], plain[20 + length :]
        if not hmac.compare_digest(receive_id, self.receive_id.encode()):
            raise WeComCryptoError("wecom_receive_id_mismatch", "the callback was encrypted for another corp id")
        return message

    def check_signature(self, msg_signature: str, timestamp: str, nonce: str, encrypt: str) -> None:
        """Raises :class:`WeComCryptoError` ``wecom_signature_invalid`` unless the signature matches."""
        expected = signature(self.token, timestamp, nonce, encrypt).encode()
        given = (msg_signature or "").lower().encode("utf-8", "surrogateescape")
        if not hmac.compare_digest(expected, given):  # bytes: a non-ASCII signature is just wrong
            raise WeComCryptoError("wecom_signature_invalid", "the callback's msg_signature does not match")

    def verify_url(self, msg_signature: str, timestamp: str, nonce: str, echostr: str) -> str:
        """The plaintext to answer a callback URL check with (``echostr`` already URL-decoded)."""
        self.check_signature(msg_signature, timestamp, nonce, echostr)
        return self.decrypt(echostr).decode()

    def decrypt_message(self, msg_signature: str, timestamp: str, nonce: str, body: bytes | str) -> dict[str, str]:
        """The fields of an encrypted callback ``POST`` body (``<xml><Encrypt>…</Encrypt></xml>``):
        the decrypted XML's child elements as ``{tag: text}`` (``FromUserName``, ``MsgType``,
        ``Content``, ``MsgId``, ``AgentID``, …)."""
        encrypt = _xml_fields(body).get("Encrypt", "")
        if not encrypt:
            raise WeComCryptoError("wecom_decrypt_failed", "the callback has no Encrypt element")
        self.check_signature(msg_signature, timestamp, nonce, encrypt)
        return _xml_fields(self.decrypt(encrypt))

    def encrypt_message(self, xml: str, timestamp: str, nonce: str) -> str:
        """An encrypted, signed envelope of ``xml`` (what WeCom posts; also a passive reply)."""
        encrypt = self.encrypt(xml)
        sig = signature(self.token, timestamp, nonce, encrypt)
        return (
            f"<xml><Encrypt><![CDATA[{encrypt}]]></Encrypt><MsgSignature><![CDATA[{sig}]]></MsgSignature>"
            f"<TimeStamp>{timestamp}</TimeStamp><Nonce><![CDATA[{nonce}]]></Nonce></xml>"
        )


def _xml_fields(body: bytes | str) -> dict[str, str]:
    """Child elements of a flat XML document as ``{tag: text}``; DTDs and entities are refused."""
    data = body.encode() if isinstance(body, str) else body
    if b"<!DOCTYPE" in data.upper() or b"<!ENTITY" in data.upper():
        raise WeComCryptoError("wecom_decrypt_failed", "the callback XML may not declare a DTD")
    try:
        root = ET.fromstring(data)
    except ET.ParseError:
        raise WeComCryptoError("wecom_decrypt_failed", "the callback is not XML") from None
    return {child.tag: (child.text or "") for child in root}
