"""The tool-schema step: JSON-Schema meta keywords that tell the model nothing, removed from tool definitions.

A tool's input schema (Anthropic ``tools[].input_schema``, OpenAI Chat ``tools[].function.parameters``,
Responses ``tools[].parameters``) is shown to the model as text. Claude Code's carry
``"$schema": "http://json-schema.org/draft-07/schema#"`` in every one: the dialect a *validator* should use,
nothing about the tool's arguments. :func:`strip_tools` removes the keywords of :data:`META_KEYWORDS` wherever
they are a keyword of a schema (the root and every nested subschema, walked by the JSON-Schema keywords that
hold subschemas), never where the same name is a property's name or data (``properties``, ``enum``,
``const``, ``default``, ``examples``). Nothing else changes: the tools' order, names, descriptions, every
other keyword and the key order stay as the client sent them.

It is a pure function of the tool list, so every request of every session forwards the same tool bytes, and
it runs before prefix replay and the provider rules (:meth:`cp_memory.gateway.flow.Gateway.plan`), which see
the stripped tools as the request's own. Switches: ``GatewayConfig.tool_schema`` (default on), per tenant
``GatewayConfig.tool_schema_tenants``, per request the ``X-CP-Schema`` header (``off`` / ``on``; an unknown
word turns the step off for that request, logged). Toggling it within a session changes the tools segment
once: the requests after the toggle start a new cached prefix.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from .protocols import Api

__all__ = ["META_KEYWORDS", "SCHEMA_HEADER", "schema_enabled", "strip_schema", "strip_tools"]

logger = logging.getLogger(__name__)

#: the request header that turns the step off (or on) for one request
SCHEMA_HEADER = "x-cp-schema"

#: keywords removed: ``$schema`` names the JSON-Schema dialect for validators; it describes no argument
META_KEYWORDS: frozenset[str] = frozenset({"$schema"})

# keywords whose value is one subschema (``items`` may also be a list of them)
_ONE = frozenset(
    {
        "additionalProperties",
        "additionalItems",
        "items",
        "contains",
        "not",
        "if",
        "then",
        "else",
        "propertyNames",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)
# keywords whose value is a list of subschemas
_LIST = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
# keywords whose value maps names (not keywords) to subschemas
_NAMED = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"})


def _sub(value: Any) -> Any:
    if isinstance(value, list):
        out = [strip_schema(v) for v in value]
        return value if all(a is b for a, b in zip(out, value)) else out
    return strip_schema(value)


def _named(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    out = {k: strip_schema(v) for k, v in value.items()}  # a list value (``dependencies``) stays as it is
    return value if all(out[k] is value[k] for k in value) else out


def strip_schema(schema: Any) -> Any:
    """``schema`` without :data:`META_KEYWORDS` at any depth; the same object when there is nothing to remove
    (a non-dict is returned as it is).

    >>> strip_schema({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
    ...               "properties": {"$schema": {"type": "string"}}})
    {'type': 'object', 'properties': {'$schema': {'type': 'string'}}}
    """
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    changed = False
    for key, value in schema.items():
        if key in META_KEYWORDS:
            changed = True
            continue
        new = _sub(value) if key in _ONE or key in _LIST else _named(value) if key in _NAMED else value
        changed = changed or new is not value
        out[key] = new
    return out if changed else schema


def _strip_tool(api: Api, tool: Any) -> Any:
    if not isinstance(tool, dict):
        return tool
    if api is Api.CHAT:
        function = tool.get("function")
        if not isinstance(function, dict) or "parameters" not in function:
            return tool
        params = strip_schema(function["parameters"])
        return tool if params is function["parameters"] else {**tool, "function": {**function, "parameters": params}}
    field = "input_schema" if api is Api.MESSAGES else "parameters"
    if field not in tool:
        return tool
    new = strip_schema(tool[field])
    return tool if new is tool[field] else {**tool, field: new}


def strip_tools(api: Api, tools: Any) -> Any:
    """The tool list with each input schema stripped (:func:`strip_schema`); the same object when nothing
    changes, and anything but a list (or a tool of a shape it does not know) as it is."""
    if not isinstance(tools, list) or api is Api.OTHER:
        return tools
    out = [_strip_tool(api, t) for t in tools]
    return tools if all(a is b for a, b in zip(out, tools)) else out


def schema_enabled(default: bool, headers: Mapping[str, str]) -> bool:
    """The step for one request: the tenant's setting, switched by ``X-CP-Schema`` (lower-case header names)."""
    value = headers.get(SCHEMA_HEADER)
    if value is None or not value.strip():
        return default
    word = value.strip().lower()
    if word in ("on", "off"):
        return word == "on"
    logger.warning(
        "gateway schema: unknown %s value %r; the tool-schema step is off for this request", SCHEMA_HEADER, value
    )
    return False
