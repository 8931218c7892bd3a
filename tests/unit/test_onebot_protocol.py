"""OneBot v11 protocol helpers: events, CQ codes, mentions, image segments, HTTP POST signatures."""

from __future__ import annotations

import base64

from mewdex.channels.onebot import inbound as onebot_inbound
from mewdex.channels.onebot import protocol as onebot
from mewdex.channels.platform import PlatformError


def test_private_and_group_events():
    private = {"post_type": "message", "message_type": "private", "self_id": 10001, "user_id": 42, "message_id": 7,
               "message": [{"type": "text", "data": {"text": " 无语 "}}]}  # fmt: skip
    message = onebot.parse_event(private)
    assert (message.message_type, message.user_id, message.group_id, message.text) == ("private", "42", None, "无语")
    group = {"post_type": "message", "message_type": "group", "self_id": 10001, "user_id": 42, "group_id": 555,
             "message": "[CQ:at,qq=10001] 开心"}  # fmt: skip
    message = onebot.parse_event(group)
    assert message.mentioned and message.text == "开心" and message.group_id == "555"
    other = {**group, "message": "[CQ:at,qq=99999] 开心"}
    assert not onebot.parse_event(other).mentioned


def test_non_message_events_are_ignored():
    assert onebot.parse_event({"post_type": "meta_event", "meta_event_type": "heartbeat"}) is None
    assert onebot.parse_event({"post_type": "message_sent", "message_type": "private"}) is None
    assert onebot.parse_event({"post_type": "notice", "notice_type": "group_increase"}) is None


def test_cq_unescape():
    segments = onebot.parse_cq("a &#91;b&#93; &amp; [CQ:image,file=x&#44;y]")
    assert segments[0] == {"type": "text", "data": {"text": "a [b] & "}}
    assert segments[1] == {"type": "image", "data": {"file": "x,y"}}


def test_image_segment_is_inline_base64_sticker():
    segment = onebot.image_segment(b"\x89PNGdata")
    assert segment["type"] == "image"
    assert segment["data"]["file"] == "base64://" + base64.b64encode(b"\x89PNGdata").decode()
    assert segment["data"]["sub_type"] == 1 and segment["data"]["subType"] == 1


def test_send_action_targets():
    assert onebot.send_action("private", "42", [])[0] == "send_private_msg"
    action, params = onebot.send_action("group", "555", [onebot.text_segment("x")])
    assert action == "send_group_msg" and params["group_id"] == 555


def test_signature():
    body = b'{"post_type":"message"}'
    header = onebot.sign_body("s3cret", body)
    assert header.startswith("sha1=") and len(header) == 45
    assert onebot.verify_signature("s3cret", body, header)
    assert not onebot.verify_signature("other", body, header)
    assert not onebot.verify_signature("s3cret", body + b" ", header)
    assert not onebot.verify_signature("s3cret", body, None)


def test_bearer_token():
    assert onebot.bearer_token("Bearer abc") == "abc"
    assert onebot.bearer_token("Token abc") == "abc"
    assert onebot.bearer_token(None, "q") == "q"
    assert onebot.bearer_token("Basic x", None) == ""


def test_failed_answer_raises():
    import pytest

    with pytest.raises(PlatformError) as err:
        onebot.check_answer({"status": "failed", "retcode": 1404, "message": "不支持的Api"}, "send_x")
    assert err.value.platform_code == 1404 and "1404" in err.value.message
    assert onebot.check_answer({"status": "ok", "retcode": 0, "data": {"message_id": 3}}, "x") == {"message_id": 3}


def test_an_attached_picture_is_an_inbound_image():
    event = {"post_type": "message", "message_type": "private", "self_id": 10001, "user_id": 42, "message_id": 8,
             "message": [{"type": "image", "data": {"file": "abc.image", "url": "https://multimedia.nt.qq.com.cn/x"}},
                         {"type": "text", "data": {"text": "像这个"}}]}  # fmt: skip
    inbound = onebot_inbound.inbound_of(event)
    assert inbound.images == ("https://multimedia.nt.qq.com.cn/x",) and inbound.text == "像这个"
    assert inbound.sender == "10001" and inbound.chat == "private:42"
