"""A channel's set-up card as data: the blocks of its card on the Channels page, declared by its package
(``CHANNEL.card``) and rendered by the framework's one generic card (``channels/card.html``, given this
module's readers by :data:`mewdex.channels.routes.CARD_HELPERS`) and script (``channels/static/channel_card.js``).
Nothing here renders or imports the web layer.

A card is a tuple of blocks, shown in order; every block may carry ``when``, a :data:`Cond`. Words are
catalogue keys (the package's ``locales/``); the scripts' words (``toast``) are ``js.*`` keys.

- :class:`Text` — a paragraph (``muted`` by default); :class:`Callout` — the public-URL callout
  (shown when ``loopback`` holds); :class:`Steps` — a numbered list, a step may end with a link;
- :class:`Form` — fields (:class:`Field`: ``text`` / ``secret`` / ``url`` / ``number`` / ``choice``),
  sent as JSON to ``method path`` (``fixed`` values added); on success :class:`Done`;
- :class:`Action` — a button that calls ``method path`` with ``body``; on success :class:`Done`;
- :class:`Reveal` — a hidden block a form's or action's answer fills (:class:`Fill`: ``code`` with an
  optional Copy button, ``link``, ``svg`` made by the server, ``status`` for a :class:`Poll`);
- :class:`Shown` — a read-only value to copy: from the page's context (``value``, a template over
  :data:`Cond` paths) or fetched when the page loads (``fetch``: ``GET`` path, answer field);
- :class:`Row` — buttons on one line; :class:`Section` — a ``<details>`` with blocks inside;
- :class:`Wait` — a live line until the channel's bot connects (OneBot's socket).

Conditions (:data:`Cond`): a tuple of terms that must all hold over the card's context: ``path``
(truthy), ``!path``, ``path=value``, ``path!=value``; paths are ``configured``, ``admin`` (the
caller may change the installation), ``loopback`` (the public URL is this machine only), ``linked``
(an active binding, not awaiting confirmation), ``info.<field>`` (the channel's entry of
``GET /api/v1/channels``) and ``binding.<field>`` / ``binding.config.<field>`` (the caller's active
binding). The ``ref`` of a block is its test hook: the CSS class (``Reveal``, ``Section``,
``Shown``, ``Text``) or the ``data-action`` / ``data-channel-form`` value (``Action``, ``Form``); a
``Text``'s ``marker`` is a bare ``data-*`` attribute.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

#: Terms that must all hold (module doc); () always holds.
Cond = tuple[str, ...]


def holds(cond: Cond, context: Mapping[str, Any]) -> bool:
    """Whether every term of ``cond`` holds over ``context`` (module doc)."""
    for term in cond:
        negate = term.startswith("!")
        path, op, want = (term[1:] if negate else term), "", ""
        for sep in ("!=", "="):
            if sep in path:
                path, want = path.split(sep, 1)
                op = sep
                break
        value = lookup(context, path)
        if op == "=":
            ok = value is not None and str(value) == want
        elif op == "!=":
            ok = value is None or str(value) != want
        else:
            ok = bool(value)
        if ok == negate:
            return False
    return True


def key_of(text: Text, context: Mapping[str, Any]) -> str:
    """The catalogue key a :class:`Text` starts with: the first of ``alt`` whose condition holds, else its first key."""
    return next((key for key, cond in text.alt if holds(cond, context)), text.keys[0])


def params_of(params: Mapping[str, str], context: Mapping[str, Any]) -> dict[str, Any]:
    """A text's parameters: name → the value at its context path."""
    return {name: lookup(context, path) for name, path in params.items()}


def format_value(template: str, context: Mapping[str, Any]) -> str:
    """``template`` with each ``{path}`` replaced by the value at that context path."""
    return re.sub(r"\{([a-z_.]+)\}", lambda m: str(lookup(context, m.group(1)) or ""), template)


def kind(block: object) -> str:
    """A block's kind, its class's name in lower case (``text``, ``form``, …): what the generic card switches on."""
    return type(block).__name__.lower()


def lookup(context: Mapping[str, Any], path: str) -> Any:
    """The value at the dotted ``path`` of ``context`` (None where any part is missing)."""
    value: Any = context
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


@dataclass(frozen=True)
class Done:
    """What the page does after a form's or action's success: ``toast`` (a ``js.*`` key), ``reveal``
    (the ``ref`` of a :class:`Reveal` filled from the answer), ``reset`` the form, ``reload`` the page."""

    toast: str | None = None
    reveal: str | None = None
    reset: bool = False
    reload: bool = False


@dataclass(frozen=True)
class Field:
    """One input of a :class:`Form`. ``kind``: ``text``, ``secret`` (a password box), ``url``,
    ``number`` (sent as a number), ``choice`` (``choices``: value → label key); ``label``/``help``:
    keys; ``blank``: what an empty box sends — ``"omit"`` (keep the stored value), ``"null"`` or
    ``"empty"``; ``value``: a context path that fills the box; ``placeholder``: a key or, with ``=``
    first, the literal text; ``pattern``, ``max_length``, ``numeric`` (the phone's digit keyboard)."""

    name: str
    label: str
    kind: Literal["text", "secret", "url", "number", "choice"] = "text"
    required: bool = False
    help: str | None = None
    pattern: str | None = None
    max_length: int | None = None
    numeric: bool = False
    blank: Literal["omit", "null", "empty"] = "empty"
    value: str | None = None
    placeholder: str | None = None
    choices: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Action:
    """A button (``data-action="<ref>"``) calling ``method path`` with ``body``; ``style``: ``""`` or
    ``secondary``; ``then``: a :class:`Poll` run with the answer."""

    ref: str
    label: str
    method: str
    path: str
    done: Done = Done()
    body: Mapping[str, Any] | None = None
    style: str = ""
    when: Cond = ()
    then: Poll | None = None


@dataclass(frozen=True)
class Form:
    """A form (``data-channel-form="<ref>"``) of ``fields`` sent to ``method path`` with ``fixed``;
    ``actions``: more buttons beside its submit button; ``load``: a ``GET`` path whose answer fills the
    boxes of the same names when the page loads (what is stored, never a secret); its errors show in the form."""

    ref: str
    method: str
    path: str
    fields: tuple[Field, ...]
    submit: str
    done: Done = Done()
    fixed: Mapping[str, Any] = field(default_factory=dict)
    style: str = ""
    actions: tuple[Action, ...] = ()
    load: str | None = None
    when: Cond = ()


@dataclass(frozen=True)
class Fill:
    """One value of a :class:`Reveal`: the answer's ``key`` shown as ``kind`` (``code``: a block to
    copy, with a Copy button when ``copy`` gives its ``data-action`` and label; ``link``; ``svg``: markup the server
    made; ``status``: a :class:`Poll`'s line), with an optional ``label`` key and class ``ref``."""

    key: str
    kind: Literal["code", "link", "svg", "status"] = "code"
    label: str | None = None
    ref: str = ""
    copy: tuple[str, str] | None = None  # (its data-action, its label key)


@dataclass(frozen=True)
class Reveal:
    """A block (``class="<ref>"``, hidden) that a success fills and shows: ``lead`` (a strong line,
    e.g. "shown once"), its ``fills``, a ``note`` after them."""

    ref: str
    fills: tuple[Fill, ...]
    lead: str | None = None
    note: str | None = None
    when: Cond = ()


@dataclass(frozen=True)
class Poll:
    """After an action: ``GET path`` (``{key}``: the action's answer's, URL-encoded) every ``every_ms``,
    at most ``tries`` times; the answer's ``field`` is said in the reveal's ``status`` fill as the
    ``words`` key + its value; ``stop``: value → ``reload`` or ``stop``."""

    path: str
    field: str
    words: str
    stop: Mapping[str, str]
    every_ms: int = 2000
    tries: int = 120


@dataclass(frozen=True)
class Text:
    """A paragraph of ``keys`` (one or more, joined by a space; the first of ``alt`` whose condition
    holds instead of the first key), with ``values``: context paths shown after the words (``code``,
    or ``strong`` with ``!`` first); ``params``: key parameter → context path; ``cls``: its classes
    (``muted`` unless given); ``marker``: a bare ``data-*`` attribute."""

    keys: tuple[str, ...]
    when: Cond = ()
    alt: tuple[tuple[str, Cond], ...] = ()
    values: tuple[str, ...] = ()
    params: Mapping[str, str] = field(default_factory=dict)
    cls: str = "muted"
    marker: str = ""


@dataclass(frozen=True)
class Callout:
    """The public-URL callout (``data-warning="public-url"``): ``key`` with ``why``; shown when the
    public URL is this machine's only (``loopback``) and ``when`` holds."""

    key: str
    when: Cond = ()


@dataclass(frozen=True)
class Step:
    key: str
    link: str | None = None  # an https:// address after the words
    text: str | None = None  # how the link reads (None: the address without its scheme)


@dataclass(frozen=True)
class Steps:
    steps: tuple[Step, ...]
    when: Cond = ()


@dataclass(frozen=True)
class Shown:
    """A read-only value to copy (``<pre><code class="wrap <ref>">``): ``value`` — a template of
    ``{base}`` (the address platforms reach) and ``{path}`` of the context — or ``fetch`` (``GET``
    path, the answer's field) filled when the page loads; ``label``: a key before it."""

    ref: str
    value: str | None = None
    fetch: tuple[str, str] | None = None
    label: str | None = None
    marker: str = ""
    when: Cond = ()


@dataclass(frozen=True)
class Row:
    """Buttons on one line."""

    actions: tuple[Action, ...]
    when: Cond = ()


@dataclass(frozen=True)
class Section:
    """A ``<details class="<ref>">``: its summary is the first of ``summary`` whose condition holds;
    ``open`` when that condition holds; its ``blocks`` inside."""

    ref: str
    summary: tuple[tuple[str, Cond], ...]
    blocks: tuple[Block, ...]
    open: Cond | None = None
    when: Cond = ()


@dataclass(frozen=True)
class Wait:
    """A live line for a channel whose bot connects to mewdex (QQ's socket): ``<ref>-wait`` says the
    first of ``text`` whose condition holds, shown while the caller's binding is linked and lacks
    ``config.<flag>``, or after the form or action ``after`` answers (then ``waiting``, a ``js.*`` key);
    it asks ``GET /api/v1/channels`` every ``every_ms`` (for at most an hour, stopping when the
    binding is gone) until the flag is set, then hides and ``<ref>-connected`` says ``done`` (a
    ``js.*`` key with ``{identity}``)."""

    ref: str
    flag: str
    text: tuple[tuple[str, Cond], ...]
    waiting: str
    done: str
    after: str
    every_ms: int = 3000
    when: Cond = ()


Block = Text | Callout | Steps | Form | Action | Reveal | Shown | Row | Section | Wait


def code_card() -> tuple[Block, ...]:
    """The card of a channel that binds by a one-time code and declares no card of its own
    (``Adapter.binds_by_code``): the button, the code revealed, or "not set up"."""
    return (
        Action(
            "bind-code",
            "channels.code.get",
            "POST",
            "/api/v1/channels/{channel}/code",
            Done(reveal="bind-code"),
            when=("configured",),
        ),
        Reveal("bind-code", (Fill("code"),), note="channels.code.note", when=("configured",)),
        Text(("channels.code.not_configured",), when=("!configured",)),
    )
