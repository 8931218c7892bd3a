"""The face of the assistant that the other layers call (contract ``assistant-face``: outside
:mod:`mewdex.assistant` only this module, the package and its routes, which the web layer mounts,
are imported):

- the MCP server's tools: the catalogue's :class:`Tool` with :class:`ToolContext`, :class:`ToolFailure`,
  :class:`Pictured`, :func:`offered_tools` (a surface's tools), :func:`call_tool`;
- a chat's turn (the channels): :func:`post` (answer a message without streaming),
  :func:`answering_from` / :func:`in_pool` (a chat's pool), :func:`search_ids` (the memes a chat
  message finds), :func:`language` (``zh`` or ``en`` of a text);
- conversations written by others (a channel's standing conversation, a schedule's push):
  :func:`create_conversation`, :func:`append_message`, :func:`artifact_refs` (the chat's meme cards);
- the runtime's schedule of the run reaper: :data:`REAPING_INTERVAL_SECONDS`.
"""

from __future__ import annotations

from mewdex.assistant.catalogue import Pictured, Tool, ToolContext, ToolFailure
from mewdex.assistant.catalogue import call as call_tool
from mewdex.assistant.catalogue import offered as offered_tools
from mewdex.assistant.chat import artifact_refs, post
from mewdex.assistant.conversations import append_message
from mewdex.assistant.conversations import create as create_conversation
from mewdex.assistant.pool import answering_from, in_pool
from mewdex.assistant.retrieval import language, search_ids
from mewdex.assistant.runs import REAPING_INTERVAL_SECONDS

__all__ = [
    "REAPING_INTERVAL_SECONDS",
    "Pictured",
    "Tool",
    "ToolContext",
    "ToolFailure",
    "answering_from",
    "append_message",
    "artifact_refs",
    "call_tool",
    "create_conversation",
    "in_pool",
    "language",
    "offered_tools",
    "post",
    "search_ids",
]
