"""WeCom's WXBizMsgCrypt against the official test vectors (the 企业微信 sample code's values)."""

from __future__ import annotations

import pytest

from mewdex.channels.wecom.crypto import WeComCryptoError, WXBizMsgCrypt, signature

TOKEN, CORP_ID, AES_KEY = "QDG6eK", "wx5823bf96d3bd56c7", "jWmYm7qr5nMoAUwZRjGtBxmz3KA1tkAj3ykkR6q2B2C"
ECHOSTR = "P9nAzCzyDtyTWESHep1vC5X9xho/qYX3Zpb4yKa9SKld1DsH3Iyt3tP3zNdtp+4RPcs8TgAE7OaBO+FZXvnaqQ=="
POST_ENCRYPT = (
    "RypEvHKD8QQKFhvQ6QleEB4J58tiPdvo+rtK1I9qca6aM/wvqnLSV5zEPeusUiX5L5X/0lWfrf0QADHHhGd3QczcdCUpj911L3vg3W/sYYvu"
    "JTs3TUUkSUXxaccAS0qhxchrRYt66wiSpGLYL42aM6A8dTT+6k4aSknmPj48kzJs8qLjvd4Xgpue06DOdnLxAUHzM6+kDZ+HMZfJYuR+Ltw"
    "Gc2hgf5gsijff0ekUNXZiqATP7PF5mZxZ3Izoun1s4zG4LUMnvw2r+KqCKIw+3IQH03v+BCA9nMELNqbSf6tiWSrXJB3LAVGUcallcrw8V"
    "2t9EL4EhzJWrQUax5wLVMNS0+rUPA3k22Ncx4XXZS9o0MBH27Bo6BpNelZpS+/uh9KsNlY6bHCmJU9p8g7m3fVKn28H3KDYA5Pl/T8Z1pt"
    "DAVe0lXdQ2YoyyH2uyPIGHBZZIs2pDBS8R07+qN+E7Q=="
)
POST_BODY = (
    f"<xml><ToUserName><![CDATA[{CORP_ID}]]></ToUserName><Encrypt><![CDATA[{POST_ENCRYPT}]]></Encrypt>"
    "<AgentID><![CDATA[218]]></AgentID></xml>"
)


def crypt() -> WXBizMsgCrypt:
    return WXBizMsgCrypt(TOKEN, AES_KEY, CORP_ID)


def test_signature_of_the_official_verify_url_vector():
    assert signature(TOKEN, "1409659589", "263014780", ECHOSTR) == "5c45ff5e21c57e6ad56bac8758b79b1d9ac89fd3"


def test_verify_url_decrypts_the_official_echostr():
    echo = crypt().verify_url("5c45ff5e21c57e6ad56bac8758b79b1d9ac89fd3", "1409659589", "263014780", ECHOSTR)
    assert echo == "1616140317555161061"


def test_decrypt_message_opens_the_official_callback():
    fields = crypt().decrypt_message("477715d11cdb4164915debcba66cb864d751f3e6", "1409659813", "1372623149", POST_BODY)
    assert fields["FromUserName"] == "mycreate"
    assert fields["Content"] == "hello"
    assert fields["MsgId"] == "4561255354251345929"


def test_a_wrong_signature_is_refused():
    with pytest.raises(WeComCryptoError) as err:
        crypt().verify_url("0" * 40, "1409659589", "263014780", ECHOSTR)
    assert err.value.code == "wecom_signature_invalid"


def test_another_corp_id_is_refused():
    other = WXBizMsgCrypt(TOKEN, AES_KEY, "wwanothercorp")
    with pytest.raises(WeComCryptoError) as err:
        other.verify_url("5c45ff5e21c57e6ad56bac8758b79b1d9ac89fd3", "1409659589", "263014780", ECHOSTR)
    assert err.value.code == "wecom_receive_id_mismatch"


def test_round_trip_pads_to_32_byte_blocks():
    c = crypt()
    for size in (0, 1, 11, 12, 31, 32, 100):
        message = "消" * size
        encrypted = c.encrypt(message)
        import base64

        assert len(base64.b64decode(encrypted)) % 32 == 0
        assert c.decrypt(encrypted).decode() == message


def test_encrypt_message_envelope_is_signed_and_decryptable():
    c = crypt()
    envelope = c.encrypt_message("<xml><Content><![CDATA[hi]]></Content></xml>", "1476422779", "1597212914")
    import re

    sig = re.search(r"<MsgSignature><!\[CDATA\[(\w+)\]\]>", envelope).group(1)
    assert c.decrypt_message(sig, "1476422779", "1597212914", envelope) == {"Content": "hi"}


def test_a_bad_aes_key_and_a_dtd_are_refused():
    with pytest.raises(WeComCryptoError):
        WXBizMsgCrypt(TOKEN, "short", CORP_ID)
    c = crypt()
    evil = '<!DOCTYPE x [<!ENTITY a "b">]><xml><Encrypt>&a;</Encrypt></xml>'
    with pytest.raises(WeComCryptoError):
        c.decrypt_message("x", "1", "2", evil)
