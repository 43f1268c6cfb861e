"""Operator routes for API keys: create, list, revoke."""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.db import SessionDep
from app.errors import ApiCode, ApiError, error_responses
from app.keys import repository, service
from app.keys.deps import OperatorDep
from app.keys.schemas import KeyCreate, KeyCreated, KeyList, KeyView

router = APIRouter(prefix="/v1/keys", tags=["keys"], responses=error_responses(401, 403, 429))


@router.post("", status_code=201, response_model=KeyCreated, responses=error_responses(422))
def create_key(body: KeyCreate, session: SessionDep, _caller: OperatorDep) -> KeyCreated:
    """Create a key; the answer holds its token, which is never shown again."""
    new = service.create_key(session, body.role, body.name)
    session.commit()
    return KeyCreated(**KeyView.of(new.key).model_dump(), token=new.token)


@router.get("", response_model=KeyList)
def list_keys(session: SessionDep, _caller: OperatorDep) -> KeyList:
    """List every key (ids, roles, labels; never secrets)."""
    return KeyList(items=[KeyView.of(k) for k in repository.list_keys(session)])


@router.delete("/{key_id}", response_model=KeyView, responses=error_responses(404))
def revoke_key(key_id: str, session: SessionDep, _caller: OperatorDep, request: Request) -> KeyView:
    """Revoke a key; requests with it then get 401 invalid_api_key."""
    key = service.revoke_key(session, key_id)
    if key is None:
        raise ApiError(404, ApiCode.KEY_NOT_FOUND, f"No key with id {key_id!r}.")
    session.commit()
    request.app.state.key_cache.clear()
    return KeyView.of(key)
