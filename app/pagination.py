"""Keyset (cursor) pagination: opaque cursors and the "after this row" condition.

A cursor is base64url JSON ``{"s": sort, "k": [sort value, id]}``. It is only a
position, never a filter: the caller sends the same filters with each page.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, or_, tuple_
from sqlalchemy.orm import InstrumentedAttribute
from sqlalchemy.sql.elements import UnaryExpression

from app.errors import ApiCode, ApiError


def bad_cursor(detail: str) -> ApiError:
    """The 400 answer for a cursor that cannot be used."""
    return ApiError(400, ApiCode.BAD_CURSOR, f"The cursor is not valid: {detail}.")


def encode_cursor(sort: str, value: Any, row_id: str) -> str:
    """An opaque cursor pointing just after the row ``(value, row_id)``."""
    if isinstance(value, datetime):
        value = value.astimezone(UTC).isoformat()
    raw = json.dumps({"s": sort, "k": [value, row_id]}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, sort: str) -> tuple[Any, str]:
    """The ``(value, id)`` of a cursor made for ``sort``; 400 ``bad_cursor`` otherwise."""
    if len(cursor) > 512:
        raise bad_cursor("too long")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise bad_cursor("not a cursor this API issued") from None
    if not isinstance(data, dict) or not isinstance(data.get("k"), list) or len(data["k"]) != 2:
        raise bad_cursor("not a cursor this API issued")
    if data.get("s") != sort:
        raise bad_cursor(f"it was made for sort={data.get('s')!r}, not sort={sort!r}")
    value, row_id = data["k"]
    if not isinstance(row_id, str):
        raise bad_cursor("malformed position")
    return value, row_id


def cursor_datetime(value: Any) -> datetime:
    """A cursor's timestamp value, validated."""
    if not isinstance(value, str):
        raise bad_cursor("malformed time")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise bad_cursor("malformed time") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def cursor_float(value: Any) -> float | None:
    """A cursor's numeric value (None for rows whose value is null), validated."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise bad_cursor("malformed number")
    return float(value)


def order_by(column: InstrumentedAttribute[Any], id_column: InstrumentedAttribute[Any], descending: bool,
             nullable: bool) -> list[UnaryExpression[Any]]:
    """ORDER BY for the keyset ``(column, id)``; nulls always last."""
    first = column.desc() if descending else column.asc()
    if nullable:
        first = first.nulls_last()
    return [first, id_column.desc() if descending else id_column.asc()]


def after(column: InstrumentedAttribute[Any], id_column: InstrumentedAttribute[Any], value: Any,
          row_id: str, descending: bool, nullable: bool) -> ColumnElement[bool]:
    """Rows strictly after ``(value, row_id)`` in the order of ``order_by``."""
    if not nullable:
        if descending:
            return tuple_(column, id_column) < tuple_(value, row_id)
        return tuple_(column, id_column) > tuple_(value, row_id)
    id_after = id_column < row_id if descending else id_column > row_id
    if value is None:  # already inside the trailing block of nulls
        return and_(column.is_(None), id_after)
    beyond = column < value if descending else column > value
    return or_(beyond, and_(column == value, id_after), column.is_(None))
