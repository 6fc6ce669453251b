"""`tools` / `tool_choice` on /v1/chat/completions: the request checked (ubatch.chat.tool_plan; 400 naming the
field), the sampling of a forced call (its stop, the constraint of its arguments to the tool's JSON schema when
the grammar engine is there), and the streamed deltas merged per chunk."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from ubatch.chat import tools as T
from ubatch.chat.tool_plan import ToolError, ToolPlan
from ubatch.server.errors import APIError


def check(tools: Any, tool_choice: Any, parallel_tool_calls: Optional[bool] = None) -> ToolPlan:
    """ubatch.chat.tool_plan.check, its errors as 400s naming the field (a forced call is constrained by the
    grammar engine)."""
    from ubatch.chat.tool_plan import check as _check
    try:
        return _check(tools, tool_choice, parallel_tool_calls, constrained=True)
    except ToolError as e:
        raise APIError(400, str(e), param=e.param) from None


def constrain(params, plan: ToolPlan):
    """A forced call ends with its </tool_call> (a hidden stop string: one call is asked for); its arguments
    are sampled under the tool's JSON schema when the engine takes a json_schema (the grammar engine), else
    the opened answer steers the model."""
    import dataclasses
    if plan.forced is None:                 # "auto" / "required": the calls under the tools' schemas
        extra = plan.calls_sampling() if params.grammar is None and params.json_schema is None else {}
        return dataclasses.replace(params, **extra) if extra else params
    params = dataclasses.replace(params, stop=list(params.stop or []) + [T.CLOSE])
    if plan.constrained:
        params = dataclasses.replace(params, **plan.sampling())
    return params


def merge_deltas(deltas: List[dict]) -> dict:
    """Several chat deltas as one (content joined, tool_calls listed in order)."""
    out: Dict[str, Any] = {}
    for d in deltas:
        if "content" in d:
            out["content"] = out.get("content", "") + d["content"]
        if "tool_calls" in d:
            out.setdefault("tool_calls", []).extend(d["tool_calls"])
    return out
