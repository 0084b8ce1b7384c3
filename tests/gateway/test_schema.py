"""The tool-schema step (issue 31, modelled cost): ``$schema`` leaves the tools' input schemas, nothing else.

Claude Code sends ``"$schema": "http://json-schema.org/draft-07/schema#"`` in each of its 14 tool schemas: the
dialect a validator would use, no word about any argument. The gateway removes that keyword wherever it is a
keyword of a schema, never where ``$schema`` is a property's name or data, and changes nothing else. Because
the step is a pure function of the tool list, every request of every session forwards the same tool bytes,
and prefix replay keeps each request's prefix as sent before. Off (config, tenant or ``X-CP-Schema: off``),
the client's own bytes go out.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest

from benchmarks.agents.trace import load_trace
from cp_memory.gateway import UpstreamKind
from cp_memory.gateway.protocols import Api, segments
from cp_memory.gateway.replay import strip_marks
from cp_memory.gateway.schema import strip_schema, strip_tools

from .content_sessions import numbered_file, tool_session
from .test_content import APIS, HEADERS, drive, gateway
from .test_replay_trace import TRACE

DRAFT7 = "http://json-schema.org/draft-07/schema#"

# a schema as Claude Code sends one, with the nesting JSON Schema allows, and "$schema" also as a property
# name, an enum value and a default (data the model must see)
EDIT = {
    "$schema": DRAFT7,
    "type": "object",
    "properties": {
        "file_path": {"type": "string", "description": "The absolute path\nof the file"},
        "$schema": {"type": "string", "enum": ["$schema", "draft-07"], "default": "$schema"},
        "edits": {"type": "array", "items": {"$schema": DRAFT7, "$ref": "#/$defs/edit"}},
        "mode": {"anyOf": [{"$schema": DRAFT7, "const": "replace"}, {"type": "null"}]},
    },
    "$defs": {"edit": {"$schema": DRAFT7, "type": "object", "additionalProperties": False}},
    "required": ["file_path"],
    "additionalProperties": False,
}


def test_only_the_meta_keyword_leaves_at_every_depth_and_data_stays() -> None:
    out = strip_schema(copy.deepcopy(EDIT))
    assert out == {
        "type": "object",
        "properties": {
            "file_path": {"type": "string", "description": "The absolute path\nof the file"},
            "$schema": {"type": "string", "enum": ["$schema", "draft-07"], "default": "$schema"},
            "edits": {"type": "array", "items": {"$ref": "#/$defs/edit"}},
            "mode": {"anyOf": [{"const": "replace"}, {"type": "null"}]},
        },
        "$defs": {"edit": {"type": "object", "additionalProperties": False}},
        "required": ["file_path"],
        "additionalProperties": False,
    }
    # key order as sent, description newlines kept: the bytes are the client's less the removed pairs
    assert list(out) == [k for k in EDIT if k != "$schema"]
    assert list(out["properties"]) == list(EDIT["properties"])
    assert EDIT["$schema"] == DRAFT7  # the input is not modified


@pytest.mark.parametrize("value", [None, "a string", 3, True, ["$schema"], {"type": "object"}])
def test_what_holds_no_meta_keyword_comes_back_as_the_same_object(value: Any) -> None:
    assert strip_schema(value) is value
    assert strip_tools(Api.MESSAGES, value) is value  # not a list of tools: as it is


def test_each_api_strips_its_own_schema_field_and_leaves_other_tools_alone() -> None:
    server_tool = {"type": "web_search_20250305", "name": "web_search"}
    messages = [{"name": "edit", "input_schema": EDIT}, server_tool, "not a tool"]
    chat = [{"type": "function", "function": {"name": "edit", "parameters": EDIT}}, {"type": "custom"}]
    responses = [{"type": "function", "name": "edit", "parameters": EDIT}, {"type": "web_search"}]
    m, c, r = strip_tools(Api.MESSAGES, messages), strip_tools(Api.CHAT, chat), strip_tools(Api.RESPONSES, responses)
    for stripped in (m[0]["input_schema"], c[0]["function"]["parameters"], r[0]["parameters"]):
        assert stripped == strip_schema(EDIT) and "$schema" not in stripped
    assert m[1] is server_tool and m[2] == "not a tool" and c[1] is chat[1] and r[1] is responses[1]
    assert m[0]["name"] == "edit" and list(m[0]) == ["name", "input_schema"]


def _with_schema_tools(api: Api, body: dict[str, Any]) -> dict[str, Any]:
    """The session's request with a second tool whose schema carries ``$schema`` (as Claude Code's do)."""
    out = copy.deepcopy(body)
    if api is Api.MESSAGES:
        out["tools"].append({"name": "edit", "description": "Edit a file.", "input_schema": EDIT})
    elif api is Api.CHAT:
        out["tools"].append({"type": "function", "function": {"name": "edit", "parameters": EDIT}})
    else:
        out["tools"].append({"type": "function", "name": "edit", "parameters": EDIT})
    return out


def _tools(raw: bytes) -> str:
    body = json.loads(raw)
    return json.dumps(strip_marks(body["tools"]), ensure_ascii=False, separators=(",", ":"))


def _session(api: Api) -> list[dict[str, Any]]:
    reads = [numbered_file(n, 8) for n in ("a.conf", "b.conf", "c.conf", "d.conf")]
    return [_with_schema_tools(api, b) for b in tool_session(api, reads)]


@pytest.mark.parametrize("api", APIS)
def test_a_session_forwards_the_same_stripped_tool_bytes_on_every_request(api: Api) -> None:
    """Four requests of one session: the tools go out identical each time, without ``$schema``, and each
    request's segments start with the ones sent before (replay keeps the whole earlier request)."""
    bodies = _session(api)
    sent = drive(gateway(UpstreamKind.ANTHROPIC if api is Api.MESSAGES else UpstreamKind.OPENAI), api, bodies)
    (tools,) = {_tools(raw) for raw in sent}
    assert DRAFT7 not in tools
    assert '"$schema":{"type":"string"' in tools  # the property named "$schema" stays
    assert _tools(sent[0]) == _client_tools_less_schema(api, bodies[0])
    for before, after in zip(sent, sent[1:]):
        b, a = ([json.dumps(strip_marks(s)) for s in segments(api, json.loads(r))[0]] for r in (before, after))
        assert a[: len(b)] == b


def _client_tools_less_schema(api: Api, body: dict[str, Any]) -> str:
    """The client's tool bytes with each ``"$schema":"<dialect URL>"`` pair cut out, as text."""
    raw = json.dumps(body["tools"], ensure_ascii=False, separators=(",", ":"))
    return re.sub(r',?"\$schema":"https?://json-schema\.org/[^"]*"', "", raw).replace("{,", "{")


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    "settings, headers",
    [
        ({"tool_schema": False}, HEADERS),
        ({}, {**HEADERS, "x-cp-schema": "off"}),
        ({}, {**HEADERS, "x-cp-schema": "sideways"}),  # an unknown word: off, the conservative reading
    ],
)
def test_switched_off_the_clients_own_bytes_go_out(api: Api, settings: dict[str, Any], headers: dict[str, str]) -> None:
    body = _session(api)[0]
    raw = json.dumps(body).encode()
    gw = gateway(**settings)
    plan = gw.plan(api, headers, raw)
    assert plan.content == raw and not plan.changed
    on = gateway().plan(api, HEADERS, raw)
    assert on.changed and DRAFT7.encode() not in on.content


def test_a_tenant_can_be_switched_off_alone() -> None:
    body = _session(Api.CHAT)[0]
    raw = json.dumps(body).encode()
    secret = "a gateway secret of thirty-two bytes or more"  # tenant ids stable across gateways
    tenant = gateway(secret=secret).identify(Api.CHAT, HEADERS, body).tenant
    gw = gateway(secret=secret, tool_schema_tenants={tenant: False})
    assert gw.plan(Api.CHAT, HEADERS, raw).content == raw
    other = {"authorization": "Bearer sk-tenant-two"}
    assert DRAFT7.encode() not in gw.plan(Api.CHAT, other, raw).content


def test_claude_codes_recorded_requests_all_forward_one_tool_text() -> None:
    """The committed Claude Code trace (4 sessions, 20 requests): every request's tools go out as the same
    bytes, which are Claude Code's own with the 14 ``$schema`` pairs (draft-07 and 2020-12) cut out, and nothing
    else changed."""
    records = [r for r in load_trace(TRACE) if str(r.get("path", "")).split("?")[0].endswith("/v1/messages")]
    gw = gateway(UpstreamKind.ANTHROPIC)
    sent_tools, client_tools = set(), set()
    for record in records:
        body = record["body"] if isinstance(record["body"], dict) else json.loads(record["body"])
        headers = {k.lower(): v for k, v in dict(record["headers"]).items()}
        plan = gw.plan(Api.MESSAGES, headers, json.dumps(body).encode())
        assert not plan.failed_open
        gw.commit(plan)
        sent_tools.add(_tools(plan.content))
        client_tools.add(_client_tools_less_schema(Api.MESSAGES, {"tools": strip_marks(body["tools"])}))
    assert len(sent_tools) == 1 and sent_tools == client_tools
    assert "$schema" not in next(iter(sent_tools))
