"""Route: the paired comparison of two arms' per-seed numbers."""

from __future__ import annotations

import math

from fastapi import APIRouter

from app.compare.schemas import CompareRequest, Comparison
from app.errors import ApiCode, ApiError, error_responses
from app.keys.deps import ReaderDep

router = APIRouter(tags=["compare"], responses=error_responses(401, 403, 422, 429))


@router.post("/v1/compare", response_model=Comparison)
def compare(body: CompareRequest, _caller: ReaderDep) -> Comparison:
    """Exact paired sign-flip statistics of idea - baseline: the report's comparison block."""
    import numpy  # numpy/scipy: loaded on first use

    from bench.stats import compare as compare_arms

    try:
        with numpy.errstate(over="raise", invalid="raise"):
            result = compare_arms(body.baseline, body.idea, lower_is_better=body.lower_is_better,
                                  alpha=body.alpha).as_dict()
    except (ValueError, FloatingPointError, OverflowError) as exc:
        raise ApiError(422, ApiCode.INVALID_COMPARISON, f"The numbers cannot be compared: {exc}.") from None
    if any(isinstance(v, float) and not math.isfinite(v) for v in result.values()):
        raise ApiError(422, ApiCode.INVALID_COMPARISON,
                       "The numbers are so large that their differences overflow; rescale them.")
    return Comparison.model_validate(result)
