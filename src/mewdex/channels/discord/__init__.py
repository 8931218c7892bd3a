"""Discord: application commands over the HTTP interactions endpoint, scheduled memes to a channel.

Each mewdex account brings its own Discord application (mewdex/channels/guides/discord.md). Modules:

- ``api``: the REST calls (through :mod:`mewdex.channels.platform`);
- ``interactions``: Ed25519 verification, the answer within three seconds, the ``discord_interaction``
  task that fills in a deferred answer (``/meme``, "Find a meme for this", "Another");
- ``setup``: connect the application by its bot token, register the commands, the link code, the
  schedules' channel;
- ``adapter``: the channel adapter (scheduled memes to the chosen channel); imported in every process;
- ``routes``: ``/api/v1/channels/discord/…`` (set-up) and ``/channels/discord/<app>/interactions``
  (Discord's POSTs), mounted by the web app;
- ``locales/{en,zh}.json``: its words (the card, the replies, the command descriptions).
"""

from pathlib import Path

from mewdex.channels.discord import card
from mewdex.channels.registry import Channel, declare

CHANNEL = Channel(
    name="discord",
    modules=("mewdex.channels.discord.adapter",),
    routes="mewdex.channels.discord.routes",
    locales=Path(__file__).parent / "locales",
    card=card.CARD,  # its card on the Channels page (mewdex.channels.card)
)
declare(CHANNEL)  # imports its modules: importing the package provides its adapter
