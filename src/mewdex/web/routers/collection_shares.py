"""Sharing a collection (issue 43): its members (``/api/v1/collections/{id}/members``) and its public
links (``/api/v1/collections/{id}/links``), both the owner's alone, and a member's own choice
(``/api/v1/collections/{id}/membership``: answer chats from it); the rules live in
:mod:`mewdex.library.sharing`."""

from __future__ import annotations

from uuid import UUID

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from mewdex.dto.collections import (
    LinkBrief,
    LinkCreated,
    LinkList,
    LinkRequest,
    Member,
    MemberList,
    MemberRequest,
    Membership,
    MembershipRequest,
)
from mewdex.dto.scopes import ScopeContext
from mewdex.library import sharing
from mewdex.web.deps import current_scope, current_user_id, db_session, parse_id, public_base_url

router = APIRouter(prefix="/api/v1/collections", tags=["collections"])


def _link_brief(link) -> LinkBrief:
    return LinkBrief(
        id=str(link.id),
        expires_at=link.expires_at.isoformat(),
        created_at=link.created_at.isoformat(),
        show_owner=link.show_owner,
    )


@router.post("/{collection_id}/links", status_code=201, response_model=LinkCreated)
def create_link(
    collection_id: str,
    body: LinkRequest,
    request: Request,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    """``{"expires_in_days": 1–365 (default 30), "show_owner": false}`` → 201 ``{"id", "url",
    "expires_at", "created_at", "show_owner"}``: anyone with ``url`` sees the collection's gallery
    (no sign-in) until it expires or is deleted; the token in it is shown only here. 404
    ``not_found``, 422 ``expiry_invalid``, 409 ``too_many_links``."""
    link, token = sharing.create_link(
        session, scope, parse_id(collection_id, "collection"), body.expires_in_days, body.show_owner
    )
    session.refresh(link)
    return LinkCreated(**_link_brief(link).model_dump(), url=f"{public_base_url(request)}/s/{token}")


@router.get("/{collection_id}/links", response_model=LinkList)
def list_links(
    collection_id: str, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)
):
    """``{"links": [{"id", "expires_at", "created_at", "show_owner"}]}``: the unexpired links, newest
    first (never their tokens); 404 ``not_found``."""
    links = sharing.list_links(session, scope, parse_id(collection_id, "collection"))
    return LinkList(links=[_link_brief(link) for link in links])


@router.delete("/{collection_id}/links/{link_id}", status_code=204)
def delete_link(
    collection_id: str,
    link_id: str,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
) -> Response:
    """Delete a link: its URL answers 404 from the next request on; 204, or 404 ``not_found``."""
    sharing.delete_link(session, scope, parse_id(collection_id, "collection"), parse_id(link_id, "link"))
    return Response(status_code=204)


@router.get("/{collection_id}/members", response_model=MemberList)
def list_members(
    collection_id: str, session: Session = Depends(db_session), scope: ScopeContext = Depends(current_scope)
):
    """``{"members": [{"email", "role", "created_at"}]}`` by email; the owner's alone (404 ``not_found``)."""
    rows = sharing.list_members(session, scope, parse_id(collection_id, "collection"))
    return MemberList(
        members=[Member(email=email, role=m.role, created_at=m.created_at.isoformat()) for m, email in rows]
    )


@router.put("/{collection_id}/members/{email}", response_model=Member)
def put_member(
    collection_id: str,
    email: str,
    body: MemberRequest,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
):
    """``{"role": "viewer" | "editor"}``: share the collection with the account of ``email`` (or change
    its role). 404 ``not_found`` (collection or account), 422 ``role_invalid`` / ``member_is_owner``,
    409 ``too_many_members``."""
    member = sharing.set_member(session, scope, parse_id(collection_id, "collection"), email, body.role)
    rows = sharing.list_members(session, scope, member.collection_id)
    email_of = {m.user_id: e for m, e in rows}
    return Member(email=email_of[member.user_id], role=member.role, created_at=member.created_at.isoformat())


@router.delete("/{collection_id}/members/{email}", status_code=204)
def delete_member(
    collection_id: str,
    email: str,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
) -> Response:
    """End the share at once (the account's next request gets 404); 204, or 404 ``not_found``."""
    sharing.remove_member(session, scope, parse_id(collection_id, "collection"), email)
    return Response(status_code=204)


@router.put("/{collection_id}/membership", response_model=Membership)
def put_membership(
    collection_id: str,
    body: MembershipRequest,
    session: Session = Depends(db_session),
    scope: ScopeContext = Depends(current_scope),
    user_id: UUID | None = Depends(current_user_id),
):
    """A member's own choice for a collection shared with it: ``{"use_in_chat": true}`` makes its
    assistant (web chat, MCP, chat apps) answer from the collection's memes too, ``false`` stops it.
    404 ``not_found`` (not a member: the owner's collections are its library already), 422
    ``invalid_request``."""
    granted = sharing.set_use_in_chat(session, scope, user_id, parse_id(collection_id, "collection"), body.use_in_chat)
    role = granted.role  # viewer or editor (sharing.access)
    return Membership(collection_id=str(granted.collection.id), role=role, use_in_chat=granted.use_in_chat)  # type: ignore[arg-type]
