"""The webhook channel (package): memes (and texts) POSTed to a URL the user gives, signed per Standard
Webhooks by :mod:`mewdex.providers.webhook` (its ``sign``/``send``; each call is audited there).

Binding: :func:`connect` checks the URL (http(s), no credentials, the egress guard), makes a
``whsec_`` secret (sealed in the binding's config; shown once, by the answer that made it) and binds
the scope. Outbound only: no identity, no inbound.

Events: ``channel.meme`` ``{"meme_id", "display_name", "sha256", "extension", "caption", "image_url",
"image_expires_at"}`` and ``channel.text`` ``{"text"}``; the body's ``timestamp`` is when the
delivery was queued (ISO 8601 UTC; the same on every retry). The image travels as a link, not in
the payload (Standard Webhooks advises small bodies): ``image_url`` is a signed, expiring
``{MEWDEX_PUBLIC_URL}/media/{id}?exp=…&sig=…`` (:mod:`mewdex.platform.media_urls`, valid
``MEWDEX_MEDIA_URL_TTL_SECONDS``, for the binding's owner; dies with a password change or a
disabled account). Without ``MEWDEX_PUBLIC_URL`` there is no address to link to: an image of at
most :data:`INLINE_IMAGE_BYTES` goes inline as ``image_base64``, a larger one is left out
(``image_omitted: "public_url_missing"``; ``meme_id`` and ``sha256`` still name it). A non-2xx
answer is a failed delivery with the status as the platform code (5xx and no answer are retried).

Modules: ``adapter`` (sending), ``setup`` (:func:`setup.connect`), ``routes`` (``POST /api/v1/channels/webhook``).
"""

from __future__ import annotations

from pathlib import Path

from mewdex.channels.registry import Channel, declare
from mewdex.channels.webhook import card

NAME = "webhook"
CHANNEL = Channel(
    name=NAME,
    modules=("mewdex.channels.webhook.adapter",),
    routes="mewdex.channels.webhook.routes",
    locales=Path(__file__).parent / "locales",  # its words, {en,zh}.json
    card=card.CARD,  # its card on the Channels page (mewdex.channels.card)
    shown_by="url",  # a linked webhook is shown by its URL (it has no identity)
    outbound_only=True,  # no chat talks to it: no pool, no auto-save
)
declare(CHANNEL)  # imports its modules: importing the package provides its adapter
