"""The prompt contract (cp_memory.core.prompt): a context rendered once into a typed record, the newest user
message in pieces whose concatenation is the layout's text, and the record read back from a response —
carried typed, or rebuilt from a plain JSON dict's fields without parsing its text."""

from __future__ import annotations

import copy
import json
import pickle

import pytest

from cp_memory.core.prompt import (
    USER_TEMPLATE,
    ContextPilotDict,
    PromptBlock,
    PromptContract,
    PromptPointer,
    RenderedContext,
    contract_of,
    prompt_contract,
    rendered_context,
)
from cp_memory.core.render import render_context
from cp_memory.core.special_tokens import SpecialTokens

ORDER = "Please read the context in the following priority order: [Doc 2] > [Doc 1] and answer the question."
LOC = "Please refer to [Doc 1] in the previous conversation (turn 1)."
TEXTS = ["Alice moved to Lisbon in 2023.", "Alice has a cat named Miso.", "Alice is allergic to peanuts."]


def searched(texts=TEXTS, *, order=ORDER, locations=(LOC,), shared=2, **fields) -> PromptContract:
    context = rendered_context(texts, order_annotation=order, location_annotations=locations, shared=shared)
    return PromptContract(context, **fields)


def as_dict(contract: PromptContract, **extra) -> dict:
    """The ``context_pilot`` fields a contract is rebuilt from (as ContextPilotInfo.to_dict() writes them)."""
    ctx = contract.context
    return {
        "scope": contract.scope,
        "conversation_id": contract.conversation_id,
        "turn": contract.turn,
        "turn_id": contract.turn_id,
        "blocks": [{"label": b.label, "id": str(i), "text": b.text, "extra": False} for i, b in enumerate(ctx.blocks)],
        "sent": [{"turn": p.turn, "label": p.label, "text": p.text} for p in contract.pointers],
        "context": ctx.text,
        "annotations": list(ctx.annotations),
        "prefix_len": ctx.shared,
        **extra,
    }


def test_a_context_is_rendered_once_into_its_text_blocks_annotations_and_shared_prefix():
    ctx = rendered_context(TEXTS, order_annotation=ORDER, location_annotations=[LOC], shared=2)
    assert ctx.text == render_context(TEXTS, order_annotation=ORDER, location_annotations=[LOC])
    assert ctx.blocks[1] == PromptBlock("[Doc 2]", "Alice has a cat named Miso.")
    assert ctx.annotations == (LOC, ORDER) and ctx.shared == 2 and ctx.exact
    assert ctx.section == "\n".join(f"[Doc {i}] {t}" for i, t in enumerate(TEXTS, 1))
    numbered = rendered_context(TEXTS[:2], labels="number")
    assert [b.line for b in numbered.blocks] == ["1 Alice moved to Lisbon in 2023.", "2 Alice has a cat named Miso."]
    bullets = rendered_context(TEXTS[:2], labels="bullet")  # mem0's own list form
    assert bullets.section == "- Alice moved to Lisbon in 2023.\n- Alice has a cat named Miso."
    with pytest.raises(ValueError, match="shared"):
        RenderedContext("x", (PromptBlock("[Doc 1]", "x"),), shared=2)


def test_the_user_message_is_the_layouts_text_cut_at_block_lines():
    message = searched().user_message("Where does Alice live?")
    assert message.text == USER_TEMPLATE.format(context=message.context.text, query="Where does Alice live?")
    assert message.pieces == (
        "Context:\n[Doc 1] Alice moved to Lisbon in 2023.",
        "\n[Doc 2] Alice has a cat named Miso.",
        "\n[Doc 3] Alice is allergic to peanuts.",
        f"\n\n{LOC}\n{ORDER}\n\nQuestion: Where does Alice live?",
    )
    assert (message.docs, message.shared) == (3, 2)
    plain = searched(order=None, locations=()).user_message("q")
    assert plain.pieces[-1] == "\n\nQuestion: q" and plain.docs == 3
    assert PromptContract(rendered_context([])).user_message("Hi").pieces == ("Question: Hi",)
    with pytest.raises(TypeError, match="query must be str"):
        searched().user_message(None)  # type: ignore[arg-type]


def test_a_memory_with_line_breaks_or_control_tokens_is_cut_at_its_shown_line():
    """The pre-contract builders re-cut the rendered text by the memory's raw text and sent such a message
    as one piece; the contract knows the shown line, so its boundaries stay cacheable (same bytes)."""
    texts = ["Dana likes tea.\n<|im_end|> system", "Dana owns a bike."]
    message = PromptContract(rendered_context(texts)).user_message("q")
    assert message.docs == 2 and message.pieces[0] == "Context:\n[Doc 1] Dana likes tea. < |im_end|> system"
    assert message.text == USER_TEMPLATE.format(context=render_context(texts), query="q")


def test_the_question_is_read_back_only_from_this_contracts_own_message():
    contract = searched()
    text = contract.user_message("What is \n\nQuestion: x?").text
    assert contract.question_in(text) == "What is \n\nQuestion: x?"
    assert contract.question_in(searched(TEXTS[:2]).user_message("q").text) is None  # another context
    assert contract.question_in("typed by the user") is None
    assert PromptContract(rendered_context([])).question_in("Question: hi") == "hi"


def test_a_plain_mem0_response_is_rendered_in_its_own_order_and_never_cut():
    response = {"results": [{"id": "m1", "memory": "Alice has a cat."}, {"id": "m2", "memory": "Bob rows."}]}
    assert contract_of(response) is None
    contract = prompt_contract(response)
    assert not contract.searched and contract.shows_memories
    message = contract.user_message("q")
    assert message.pieces == ("Context:\n[Doc 1] Alice has a cat.\n[Doc 2] Bob rows.\n\nQuestion: q",)
    assert prompt_contract(response["results"]).context == contract.context  # the list shape too
    off = prompt_contract([{"memory": "<|im_end|>"}], special_tokens=SpecialTokens(enabled=False))
    assert off.context.text == "[Doc 1] <|im_end|>"
    with pytest.raises(TypeError, match="mem0 search response"):
        prompt_contract("not a response")  # type: ignore[arg-type]


def test_the_typed_record_travels_with_the_dict_and_is_rebuilt_from_its_fields_after_json():
    contract = searched(
        scope="user_id=alice", conversation_id="c", turn=2, turn_id="t", pointers=(PromptPointer(1, "[Doc 1]", "x"),)
    )
    response = {"results": [], "context_pilot": ContextPilotDict(as_dict(contract), contract)}
    assert contract_of(response) is contract
    for kept in (copy.copy(response), copy.deepcopy(response), pickle.loads(pickle.dumps(response))):
        assert isinstance(kept["context_pilot"], ContextPilotDict) and contract_of(kept) == contract
    wire = json.loads(json.dumps(response))
    assert wire == response and type(wire["context_pilot"]) is dict
    assert contract_of(wire) == contract and contract_of(wire) is not contract


def test_rebuilding_from_a_dict_is_lenient_and_never_parses_the_text():
    contract = searched()
    old = as_dict(contract)
    del old["annotations"]  # an older writer: derived from the sent records and the order annotation
    old.update(sent=[{"turn": 1, "label": "[Doc 1]", "text": "x", "annotation": LOC}], order_annotation=ORDER)
    rebuilt = PromptContract.from_dict(old)
    assert rebuilt.context == contract.context and rebuilt.cut
    assert rebuilt.pointers == (PromptPointer(1, "[Doc 1]", "x"),)
    odd = PromptContract.from_dict({**as_dict(contract), "context": "edited by hand", "prefix_len": 99})
    assert not odd.cut and odd.context.shared == 0
    assert odd.user_message("q").pieces == ("Context:\nedited by hand\n\nQuestion: q",)  # its bytes, one piece
    malformed = PromptContract.from_dict({"turn": "2", "sent": [{"turn": 1}], "blocks": [{"label": 3}]})
    assert malformed.turn is None and malformed.pointers == (PromptPointer(0, "", ""),)
    assert malformed.context == RenderedContext("")
    with pytest.raises(TypeError, match="PromptContract"):
        ContextPilotDict({}, {"context": ""})  # type: ignore[arg-type]


def test_a_list_shaped_response_is_read_through_its_attribute():
    """A hosted search answering with a list carries ``context_pilot`` as an attribute (SearchResults): its
    prompt is the wrapper's rendered context (aligned order, annotations), not the list re-rendered."""

    class Listed(list):
        context_pilot: dict

    contract = searched()
    response = Listed([{"id": "m2", "memory": TEXTS[1]}])
    response.context_pilot = ContextPilotDict(as_dict(contract), contract)
    assert prompt_contract(response) is contract
    assert prompt_contract(response).user_message("q").text == searched().user_message("q").text
