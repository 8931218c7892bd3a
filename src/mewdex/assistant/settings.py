"""The assistant's settings (``MEWDEX_ASSISTANT_*``), declared here and gathered into the one validated
configuration (:class:`mewdex.config.SettingsGroup`; hook ``settings``)."""

from __future__ import annotations

from pydantic import Field

from mewdex import hooks
from mewdex.config import SettingsGroup, get_settings


class AssistantSettings(SettingsGroup):
    # A run whose owner is gone (another host) or that ran this long is reaped to ``error``; the
    # pause between streamed reply chunks (0: none; tests slow it to stop mid-stream).
    assistant_run_timeout_seconds: int = Field(default=600, ge=10)
    assistant_stream_delay_ms: int = Field(default=0, ge=0, le=5000)
    # With a chat model: model calls per reply (tool steps), messages sent before older ones are
    # folded into a summary, and the auto-title by a cheap model (off: the first message titles it).
    assistant_max_steps: int = Field(default=6, ge=1, le=20)
    assistant_context_messages: int = Field(default=20, ge=4, le=200)
    assistant_llm_titles: bool = True
    assistant_title_model: str | None = Field(
        default=None, description="Model of the chat connector that titles conversations (unset: its chat model)."
    )


hooks.provide("settings", "assistant", AssistantSettings)


def settings() -> AssistantSettings:
    """This process's assistant settings (validated on first use; :class:`mewdex.config.ConfigError`)."""
    return get_settings().group(AssistantSettings)
