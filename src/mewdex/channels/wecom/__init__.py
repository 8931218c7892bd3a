"""WeCom (企业微信, package): a self-built app pushes memes to a member and takes their messages.

The admin's app lives in ``platform_settings`` (:func:`setup.configure_app`; Secret, Token and
EncodingAESKey sealed with :mod:`mewdex.providers.secrets`); a member binds their ``wecom_userid``
(the binding's identity) by sending a one-time code from :func:`setup.link` to the app;
:func:`inbound.accept_callback` queues a message for the assistant; the adapter sends memes as image
media (``media_id`` cached 3 days in ``channel_media_cache``) with the assistant's text after them.

Modules: ``api`` (the server API client), ``crypto`` (the callback's WXBizMsgCrypt), ``setup`` (the
app, the link code), ``inbound`` (the callback), ``adapter``, ``routes``.
"""

from __future__ import annotations

from pathlib import Path

from mewdex.channels.registry import Channel, declare
from mewdex.channels.wecom import card

NAME = "wecom"
CHANNEL = Channel(
    name=NAME,
    modules=("mewdex.channels.wecom.adapter",),
    routes="mewdex.channels.wecom.routes",
    errors={"wecom_ip_not_trusted": 502},  # WeCom 60020: this server's IP is not in the app's trusted IPs
    locales=Path(__file__).parent / "locales",  # its words, {en,zh}.json
    card=card.CARD,  # its card on the Channels page (mewdex.channels.card)
)
declare(CHANNEL)  # imports its modules: importing the package provides its adapter
