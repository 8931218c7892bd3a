"""The chat assistant (issue 16): conversations and messages (seed 004), the retrieval-only reply,
runs (owner, cancel, reaper). Below ``runtime``, above ``pipeline``/``search``. A capability package
(docs/architecture.md "A capability is a package"):

- the assistant itself: ``conversations``, ``catalogue``/``tools`` (the tools MCP and the chat model
  are built from), ``artifacts``, ``runs``, ``pool``, ``query``, ``retrieval``, ``agent``, ``prompts``,
  ``titles``, ``chat``, ``shared_collections``, ``errors``;
- ``service``: the face the channels, the schedules, the runtime and the MCP server call (nothing
  else of the package is imported from outside it but its routes: contract ``assistant-face``);
- ``settings``: ``MEWDEX_ASSISTANT_*`` (:class:`~.settings.AssistantSettings`, hook ``settings``);
- ``routes`` (``/api/v1/conversations`` and the chat page ``/chat``, imported by the web layer only),
  ``shapes`` (the API's request and response models), ``page.html`` (``assistant/page.html`` to the
  web layer's templates), ``static/`` (``chat.js``, ``chat.css``: served under ``/static/``),
  ``locales/{en,zh}.json`` (its words: the replies', the chat page's; added to the catalogues when the
  package is imported).
"""

from __future__ import annotations

from pathlib import Path

from mewdex import hooks
from mewdex.capability import Capability, NavEntry
from mewdex.dto import i18n

i18n.add_messages(Path(__file__).parent / "locales")

#: Its declaration (hook ``capabilities``): its error codes → HTTP status, the chat page's link in the
#: header, what the web layer mounts (its routes, its templates, its static/ folder).
CAPABILITY = hooks.provide(
    "capabilities",
    "assistant",
    Capability(
        name="assistant",
        errors={"conversation_not_deleted": 409, "run_not_active": 409},
        nav=(NavEntry(page="chat", path="/chat", label="nav.chat", order=60),),
        routes="mewdex.assistant.routes",
        templates=True,  # "assistant/page.html"
        static=True,  # chat.js, chat.css
    ),
)
