"""Single sign-on with an OpenID Connect provider (README "Single sign-on (OpenID Connect)").

The authorization code flow with PKCE (S256), checked as Authlib's OpenID client checks it, every
call to the provider through :mod:`mewdex.egress` (the issuer's own ``host:port`` may be private:
the admin named it):

1. :func:`begin`: the provider's authorization URL (scopes ``MEWDEX_OIDC_SCOPES``, by default
   ``openid email profile``) and the
   :class:`Pending` sign-in — ``state``, ``nonce``, the PKCE verifier, where to go afterwards —
   which the web layer binds to the browser (a short-lived HttpOnly cookie).
2. :func:`finish`: a provider's ``error`` ends it (``oidc_denied`` for a refused consent), the
   callback's ``state`` must be the pending one (else ``oidc_state_invalid``), the code is exchanged
   (client secret, verifier), the ID token is verified (signature against the provider's JWKS;
   ``iss``, ``aud``, ``exp``, ``iat``, ``nonce``, ``azp``, ``at_hash``: Authlib's
   :class:`~authlib.oidc.core.CodeIDToken` over joserfc, Authlib's JOSE layer), the userinfo claims
   are added (same ``sub``; the ID token's win), and :func:`account_for` picks the account.

The account rule (:func:`account_for`): the provider's subject (stored in ``users.oidc_subject``
as ``"<issuer> <sub>"``) signs into the account it is linked to, whatever its email is now. Else a
verified email (``email_verified`` true) of an account signs into it and links the subject; an
unverified one never matches. An email with no account gets one while sign-up is open or with
``MEWDEX_OIDC_AUTO_CREATE`` (the installation's first account only when the admin claim makes it
admin). A disabled account is refused. With ``MEWDEX_OIDC_ADMIN_CLAIM`` each sign-in sets the role
from the claim (the last enabled admin is never demoted).

Errors are :class:`OidcError` (``oidc_unavailable``, ``oidc_state_invalid``, ``oidc_denied``,
``oidc_failed``, ``oidc_token_invalid``, ``oidc_email_unverified``, ``oidc_account_linked``) or the
account rules' :class:`PlatformError` (``signup_disabled``, ``admin_required``,
``account_disabled``, ``email_invalid``). Nothing here logs a code, token, secret or claim.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import quote, urlencode

from authlib.common.security import generate_token
from authlib.common.urls import add_params_to_uri
from authlib.oauth2.rfc7636 import create_s256_code_challenge
from authlib.oidc.core import CodeIDToken
from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet
from joserfc.jws import JWSRegistry
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from mewdex import egress
from mewdex.config import get_settings
from mewdex.db.models import User
from mewdex.platform import users
from mewdex.platform.errors import PlatformError

log = logging.getLogger(__name__)
#: how long a started sign-in may take at the provider, seconds
PENDING_SECONDS = 600
#: how long the discovery document and the keys are kept, seconds (unknown key ids fetch the keys again)
METADATA_SECONDS = 3600
#: clock skew allowed on the ID token's times, seconds
LEEWAY_SECONDS = 120


def _fetch(method: str, url: str, headers: dict[str, str], content: bytes | None = None) -> egress.EgressResponse:
    """One call to the provider: 10 s per read, 20 s in all, at most 1 MiB."""
    return egress.fetch(method, url, headers=headers, content=content, timeout=10.0, deadline=20.0, max_bytes=1 << 20)


class OidcError(PlatformError):
    """A single sign-on that could not complete: ``code`` as in the module doc; ``message`` safe to show."""


@dataclass(frozen=True)
class Pending:
    """A started sign-in, kept by the browser until the provider sends it back: ``state`` and
    ``nonce`` (random, 32 characters), the PKCE ``verifier``, ``next`` (a path on this site) and
    ``started`` (unix seconds)."""

    state: str
    nonce: str
    verifier: str
    next: str
    started: float

    def encode(self) -> str:
        """The cookie value (URL-safe base64 of its JSON)."""
        return base64.urlsafe_b64encode(json.dumps(asdict(self)).encode()).decode().rstrip("=")

    @classmethod
    def decode(cls, value: str | None) -> Pending | None:
        """The pending sign-in of a cookie value; None when absent, unreadable or older than
        :data:`PENDING_SECONDS`."""
        if not value or len(value) > 2048:
            return None
        try:
            data = json.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
            pending = cls(**{k: data[k] for k in ("state", "nonce", "verifier", "next", "started")})
        except (ValueError, TypeError, KeyError, binascii.Error):
            return None
        if not all(isinstance(v, str) for v in (pending.state, pending.nonce, pending.verifier, pending.next)):
            return None
        if not isinstance(pending.started, (int, float)) or not 0 <= time.time() - pending.started <= PENDING_SECONDS:
            return None
        return pending


def configured() -> bool:
    """Whether a provider is set up (``MEWDEX_OIDC_ISSUER`` and its client id)."""
    settings = get_settings()
    return bool(settings.oidc_issuer and settings.oidc_client_id)


# ------------------------------------------------------------------ the provider's documents

_cache: dict[str, tuple[float, dict]] = {}
_cache_lock = threading.Lock()


def _get_json(url: str, what: str, headers: dict[str, str] | None = None) -> dict:
    """A JSON object from the provider; ``oidc_unavailable`` when it cannot be had."""
    try:
        response = _fetch("GET", url, {"Accept": "application/json", **(headers or {})})
    except egress.EgressError as exc:
        log.warning("single sign-on: the provider's %s could not be fetched (%s)", what, exc.code)
        raise OidcError("oidc_unavailable", f"the sign-in provider cannot be reached ({exc.code})") from None
    if response.status != 200:
        log.warning("single sign-on: the provider's %s answered HTTP %d", what, response.status)
        raise OidcError("oidc_unavailable", f"the sign-in provider's {what} answered HTTP {response.status}")
    try:
        data = response.json()
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise OidcError("oidc_unavailable", f"the sign-in provider's {what} is not a JSON object")
    return data


def _cached(key: str, load, *, force: bool = False) -> dict:
    now = time.monotonic()
    with _cache_lock:
        hit = _cache.get(key)
    if hit and not force and now - hit[0] < METADATA_SECONDS:
        return hit[1]
    value = load()
    with _cache_lock:
        _cache[key] = (now, value)
    return value


def metadata() -> dict:
    """The provider's discovery document (``<issuer>/.well-known/openid-configuration``), cached;
    ``oidc_unavailable`` when unreachable, when its ``issuer`` is not the configured one (a trailing
    ``/`` aside) or when it lacks the authorization, token or keys endpoint."""
    issuer = get_settings().oidc_issuer or ""

    def load() -> dict:
        data = _get_json(issuer.rstrip("/") + "/.well-known/openid-configuration", "discovery document")
        if str(data.get("issuer", "")).rstrip("/") != issuer.rstrip("/"):
            raise OidcError("oidc_unavailable", "the provider's discovery document names another issuer")
        for name in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
            if not isinstance(data.get(name), str) or not data[name]:
                raise OidcError("oidc_unavailable", f"the provider's discovery document has no {name}")
        return data

    return _cached("metadata " + issuer, load)


def _keys(meta: dict, *, force: bool = False) -> KeySet:
    uri = meta["jwks_uri"]
    try:
        return KeySet.import_key_set(_cached("jwks " + uri, lambda: _get_json(uri, "keys"), force=force))  # type: ignore[arg-type]
    except (JoseError, ValueError, TypeError, KeyError):
        raise OidcError("oidc_unavailable", "the provider's keys (JWKS) cannot be read") from None


# ------------------------------------------------------------------ the flow


def begin(redirect_uri: str, next_path: str = "/") -> tuple[str, Pending]:
    """Start a sign-in: ``(authorization URL to send the browser to, the pending sign-in to keep
    with it)``. ``redirect_uri``: this server's ``…/auth/oidc/callback``; ``next_path``: where the
    browser goes once signed in. ``oidc_unavailable`` when the provider cannot be reached."""
    settings = get_settings()
    meta = metadata()
    pending = Pending(generate_token(32), generate_token(32), generate_token(64), next_path, time.time())
    url = add_params_to_uri(
        meta["authorization_endpoint"],
        [
            ("response_type", "code"),
            ("client_id", settings.oidc_client_id or ""),
            ("redirect_uri", redirect_uri),
            ("scope", settings.oidc_scopes),
            ("state", pending.state),
            ("nonce", pending.nonce),
            ("code_challenge", create_s256_code_challenge(pending.verifier)),
            ("code_challenge_method", "S256"),
        ],
    )
    return url, pending


def finish(session: Session, pending: Pending | None, params: Mapping[str, str], redirect_uri: str) -> User:
    """Complete a sign-in from the provider's callback ``params`` (its query) and the browser's
    ``pending`` sign-in: the account to sign in (:func:`account_for`). Raises the errors of the
    module doc; ``redirect_uri`` must be the one :func:`begin` was given."""
    if params.get("error"):  # it ends here whatever its state (some providers send none with an error)
        error = params["error"][:64]
        if error in ("access_denied", "consent_required", "login_required", "interaction_required"):
            raise OidcError("oidc_denied", "the sign-in was cancelled or refused at the provider", {"error": error})
        raise OidcError("oidc_failed", "the provider could not complete the sign-in", {"error": error})
    state = params.get("state") or ""
    if pending is None or not secrets.compare_digest(state.encode(), pending.state.encode()):
        raise OidcError("oidc_state_invalid", "this sign-in was not started in this browser, or it expired")
    code = params.get("code")
    if not code:
        raise OidcError("oidc_failed", "the provider sent no authorization code")
    meta = metadata()
    tokens = _exchange(meta, code, pending.verifier, redirect_uri)
    claims = _verified_claims(meta, tokens, pending.nonce)
    return account_for(session, claims)


def _exchange(meta: dict, code: str, verifier: str, redirect_uri: str) -> dict:
    """The token endpoint's answer for ``code`` (client secret by HTTP Basic, or in the form when the
    provider supports only that); ``oidc_failed`` when it refuses (a used or expired code)."""
    settings = get_settings()
    client_id, secret = settings.oidc_client_id or "", settings.oidc_client_secret
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri, "code_verifier": verifier}
    headers = {"Accept": "application/json", "Content-Type": "application/x-www-form-urlencoded"}
    methods = meta.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
    if secret and ("client_secret_basic" in methods or "client_secret_post" not in methods):
        pair = f"{quote(client_id, safe='')}:{quote(secret, safe='')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    else:
        form["client_id"] = client_id
        if secret:
            form["client_secret"] = secret
    try:
        body = urlencode(form).encode()
        response = _fetch("POST", meta["token_endpoint"], headers, body)
    except egress.EgressError as exc:
        log.warning("single sign-on: the token endpoint could not be reached (%s)", exc.code)
        raise OidcError("oidc_unavailable", f"the sign-in provider cannot be reached ({exc.code})") from None
    try:
        data = response.json()
    except ValueError:
        data = {}
    if response.status != 200 or not isinstance(data, dict) or not isinstance(data.get("id_token"), str):
        error = str(data.get("error", "")) if isinstance(data, dict) else ""
        log.warning("single sign-on: the token endpoint refused the code (HTTP %d %s)", response.status, error[:64])
        message = "the provider did not accept the sign-in (it may have been used already)"
        raise OidcError("oidc_failed", message, {"error": error[:64]})
    return data


def _verified_claims(meta: dict, tokens: dict, nonce: str) -> dict[str, Any]:
    """The ID token's claims, verified (module doc), with the userinfo claims it lacks."""
    settings = get_settings()
    algorithms = [
        a for a in meta.get("id_token_signing_alg_values_supported") or ["RS256"] if isinstance(a, str) and a != "none"
    ]
    registry = JWSRegistry(algorithms=algorithms, strict_check_header=False)
    try:
        try:
            token = jwt.decode(tokens["id_token"], key=_keys(meta), registry=registry)
        except InvalidKeyIdError:  # the provider rotated its keys
            token = jwt.decode(tokens["id_token"], key=_keys(meta, force=True), registry=registry)
        claims = CodeIDToken(
            token.claims,
            token.header,
            {
                "iss": {"essential": True, "value": meta["issuer"]},
                "aud": {"essential": True, "value": settings.oidc_client_id},
                "sub": {"essential": True},
                "exp": {"essential": True},
            },
            {"nonce": nonce, "client_id": settings.oidc_client_id, "access_token": tokens.get("access_token")},
        )
        claims.validate(leeway=LEEWAY_SECONDS)
    except (JoseError, ValueError) as exc:
        log.warning("single sign-on: the ID token was refused (%s)", type(exc).__name__)
        raise OidcError("oidc_token_invalid", "the provider's ID token could not be verified") from None
    verified = dict(claims)
    if not isinstance(verified.get("sub"), str) or not verified["sub"]:
        raise OidcError("oidc_token_invalid", "the provider's ID token names no subject")
    userinfo = _userinfo(meta, tokens.get("access_token"))
    if userinfo.get("sub") not in (None, verified["sub"]):
        raise OidcError("oidc_token_invalid", "the provider's userinfo is about someone else")
    return {**userinfo, **verified}


def _userinfo(meta: dict, access_token: Any) -> dict:
    """The userinfo endpoint's claims (some providers put the email and groups only there); {} when
    there is no endpoint or it does not answer (the ID token's claims then stand alone)."""
    url = meta.get("userinfo_endpoint")
    if not isinstance(url, str) or not url or not isinstance(access_token, str):
        return {}
    try:
        return _get_json(url, "userinfo", headers={"Authorization": f"Bearer {access_token}"})
    except OidcError:
        return {}


# ------------------------------------------------------------------ the account


def _claim(claims: Mapping[str, Any], path: str) -> Any:
    """A claim by name, or by a dotted path into nested objects (Keycloak's ``realm_access.roles``)."""
    if path in claims:
        return claims[path]
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def admin_from_claims(claims: Mapping[str, Any]) -> bool | None:
    """Whether the claims make the account admin: ``MEWDEX_OIDC_ADMIN_CLAIM`` equals
    ``MEWDEX_OIDC_ADMIN_VALUE`` (a list claim: holds it; a boolean: ``true``/``false`` as text);
    None when no admin claim is configured (roles are then mewdex's own)."""
    settings = get_settings()
    if not settings.oidc_admin_claim:
        return None
    value, wanted = _claim(claims, settings.oidc_admin_claim), settings.oidc_admin_value
    if isinstance(value, bool):
        return str(value).lower() == wanted.lower()
    if isinstance(value, (list, tuple)):
        return wanted in [str(v) for v in value]
    return value is not None and str(value) == wanted


def _verified_email(claims: Mapping[str, Any]) -> str | None:
    email = claims.get("email")
    verified = claims.get("email_verified")
    if isinstance(email, str) and email.strip() and (verified is True or str(verified).lower() == "true"):
        return email.strip()
    return None


def account_for(session: Session, claims: Mapping[str, Any]) -> User:
    """The account verified ``claims`` (``iss``, ``sub``, ``email``, ``email_verified``, ``name``, the
    admin claim) sign into, linked, made or refused by the rule of the module doc. Raises
    ``oidc_email_unverified`` (no account linked and no verified email), ``oidc_account_linked``
    (the email's account is linked to another subject), ``signup_disabled``, ``admin_required``,
    ``account_disabled``, ``email_invalid``."""
    subject = f"{claims['iss']} {claims['sub']}"
    user = _by_subject(session, subject)
    if user is None:
        email = _verified_email(claims)
        if email is None:
            raise OidcError("oidc_email_unverified", "the provider did not confirm an email address for this sign-in")
        session.execute(select(func.pg_advisory_xact_lock(users.ACCOUNTS_LOCK)))  # one link per subject
        user = _by_subject(session, subject) or users.find_by_email(session, email)
        if user is None:
            user = _new_account(session, email, claims)
        elif user.oidc_subject and user.oidc_subject != subject:
            raise OidcError(
                "oidc_account_linked", "the account of this email signs in with another identity at the provider"
            )
        _refuse_disabled(user)
        if user.oidc_subject != subject:
            user.oidc_subject = subject
            log.info("single sign-on: account %s linked to its provider identity", user.user_id)
    _refuse_disabled(user)
    admin = admin_from_claims(claims)
    if admin is not None and (user.role == "admin") != admin:
        try:
            users.set_role(session, user, "admin" if admin else "user")
        except PlatformError:
            log.warning("single sign-on: account %s stays admin (the last enabled admin)", user.user_id)
    session.flush()
    return user


def _by_subject(session: Session, subject: str) -> User | None:
    return session.execute(select(User).where(User.oidc_subject == subject).limit(1)).scalar_one_or_none()


def _refuse_disabled(user: User) -> None:
    if user.disabled:
        raise PlatformError("account_disabled", "this account is disabled; ask the admin")


def _new_account(session: Session, email: str, claims: Mapping[str, Any]) -> User:
    """A new account for ``email`` (no password: it signs in through the provider, or with a reset
    link): while sign-up is open or with ``MEWDEX_OIDC_AUTO_CREATE``; the installation's first
    account only as an admin the claims name. Made non-admin, it gets the sign-up limits."""
    admin = admin_from_claims(claims)
    if not users.any_users(session):
        if not admin:
            raise PlatformError(
                "admin_required",
                "this server has no admin yet: create it with `mewdex user create EMAIL --admin`, "
                "or sign in with an account the provider marks admin",
            )
    elif not (get_settings().oidc_auto_create or users.signup_enabled(session)):
        raise PlatformError("signup_disabled", "no account uses this email and sign-up is closed; ask the admin")
    name = next((v for v in (claims.get("name"), claims.get("preferred_username")) if isinstance(v, str)), None)
    try:
        user = users.create_user(session, email, None, name=(name or "")[: users.MAX_NAME_CHARS] or None, role=None)
    except PlatformError as exc:
        if not exc.code.startswith("name_"):
            raise
        user = users.create_user(session, email, None, role=None)
    if admin is not None:
        user.role = "admin" if admin else "user"
    if user.role != "admin":
        users.apply_signup_limits(user)
    log.info("single sign-on: account %s made for a new provider identity", user.user_id)
    return user
