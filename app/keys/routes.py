"""Routes for API keys: the caller's own (``/me``); an operator's create, list, limits, revoke."""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.db import SessionDep
from app.deps import SettingsDep
from app.errors import ApiCode, ApiError, error_responses
from app.keys import repository, service
from app.keys.deps import CallerDep, OperatorDep
from app.keys.roles import Role
from app.keys.schemas import (
    EffectiveLimits,
    KeyCreate,
    KeyCreated,
    KeyLimitsUpdate,
    KeyList,
    KeySelf,
    KeyView,
)

router = APIRouter(prefix="/v1/keys", tags=["keys"], responses=error_responses(401, 403, 429))


@router.post("", status_code=201, response_model=KeyCreated, responses=error_responses(422))
def create_key(body: KeyCreate, session: SessionDep, _caller: OperatorDep, settings: SettingsDep) -> KeyCreated:
    """Create a key; the answer holds its token, which is never shown again."""
    new = service.create_key(session, body.role, body.name)
    session.commit()
    return KeyCreated(**KeyView.of(new.key, settings).model_dump(), token=new.token)


@router.get("", response_model=KeyList)
def list_keys(session: SessionDep, _caller: OperatorDep, settings: SettingsDep) -> KeyList:
    """List every key (ids, roles, labels, the limits in force; never secrets)."""
    return KeyList(items=[KeyView.of(k, settings) for k in repository.list_keys(session)])


@router.delete("/{key_id}", response_model=KeyView, responses=error_responses(404))
def revoke_key(key_id: str, session: SessionDep, _caller: OperatorDep, request: Request,
               settings: SettingsDep) -> KeyView:
    """Revoke a key; requests with it then get 401 invalid_api_key."""
    key = service.revoke_key(session, key_id)
    if key is None:
        raise ApiError(404, ApiCode.KEY_NOT_FOUND, f"No key with id {key_id!r}.")
    session.commit()
    request.app.state.key_cache.clear()
    return KeyView.of(key, settings)


@router.get("/me", response_model=KeySelf)
def my_key(session: SessionDep, caller: CallerDep, settings: SettingsDep) -> KeySelf:
    """The calling key (any role): its id and role, the limits in force for it, and the secret
    that signs its webhooks (POST /v1/ideas with callback_url)."""
    key = repository.get_key(session, caller.key_id)
    assert key is not None  # it authenticated this request
    if key.webhook_secret is None:  # (a key made before webhooks, never migrated)
        key.webhook_secret = service.new_webhook_secret()
        session.commit()
    limits = EffectiveLimits.for_key(key, settings)
    return KeySelf(id=key.id, name=key.name, role=Role(key.role), limits=limits, webhook_secret=key.webhook_secret)


@router.patch("/{key_id}", response_model=KeyView, responses=error_responses(404, 422))
def set_key_limits(key_id: str, body: KeyLimitsUpdate, session: SessionDep, _caller: OperatorDep,
                   request: Request, settings: SettingsDep) -> KeyView:
    """Set one key's caps on jobs in flight and jobs per UTC day (null: back to the service's
    setting; 0: no cap). Takes effect at once in this API process, within key_cache_s elsewhere.
    A revoked key (DELETE) is gone for this route as for any use: 404, though the list still
    shows it with its ``revoked_at``."""
    key = repository.get_key(session, key_id)
    if key is None:
        raise ApiError(404, ApiCode.KEY_NOT_FOUND, f"No key with id {key_id!r}.")
    if key.revoked_at is not None:
        raise ApiError(404, ApiCode.KEY_NOT_FOUND, f"Key {key_id!r} was revoked at {key.revoked_at.isoformat()}; "
                       "a revoked key has no limits to set.", hint="Create a key (POST /v1/keys) for a new holder.")
    for field in body.model_fields_set:
        setattr(key, field, getattr(body, field))
    session.commit()
    request.app.state.key_cache.clear()
    return KeyView.of(key, settings)
