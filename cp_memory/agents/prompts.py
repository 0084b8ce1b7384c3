"""Chain-of-Agents prompts (paper Tables 11–12), with the segment first so it is the reusable prefix.

A worker reads its segment, the previous worker's communication unit (CU) and the question, and writes
a CU; the manager answers from the last CU. Everything that varies between questions (previous CU,
question) follows the segment, so a recurring segment is a shared prefix of its worker prompts.

The CUs are the model's summaries of documents and may copy a document's control-token text
(``<|im_end|>``, ...): they are made inert like the documents are (:mod:`cp_memory.special_tokens`). The
segment comes rendered (:attr:`~cp_memory.agents.segment.Segment.text`, already neutralised); the question
is the caller's own text and is left as given.
"""

from __future__ import annotations

from cp_memory.core.special_tokens import DEFAULT_SPECIAL_TOKENS, SpecialTokens

__all__ = [
    "MANAGER_TEMPLATE",
    "PRIOR_TURN_TEMPLATE",
    "WORKER_TEMPLATE",
    "check_worker_template",
    "manager_prompt",
    "worker_prompt",
]

#: worker prompt (paper Table 11); the segment comes first so it is the prompt's reusable prefix
WORKER_TEMPLATE = (
    "{segment}\n"
    "Here is the summary of the previous source text: {previous_cu}\n"
    "Question: {question}\n"
    "You need to read current source text and summary of previous source text (if any) and generate a "
    "summary to include them both. Later, this summary will be used for other agents to answer the Query, "
    "if any. So please write the summary that can include the evidence for answering the Query:"
)
#: manager prompt (paper Table 12)
MANAGER_TEMPLATE = (
    "The following are given passages. However, the source text is too long and has been summarized. "
    "You need to answer based on the summary: {cu}\n"
    "Question: {question}\n"
    "Answer:"
)
#: in a conversation, the CU an earlier turn ended with, shown with the location annotations
PRIOR_TURN_TEMPLATE = "Summary of the previous conversation (turn {turn}): {cu}"


def check_worker_template(template: str) -> None:
    """Raise ``ValueError`` unless ``template`` has every field and starts with ``{segment}``."""
    for field in ("{segment}", "{previous_cu}", "{question}"):
        if field not in template:
            raise ValueError(f"worker_template must contain {field}")
    if not template.startswith("{segment}"):
        raise ValueError("worker_template must start with {segment}: the segment is the reusable prefix")


def worker_prompt(
    segment: str,
    previous_cu: str,
    question: str,
    template: str = WORKER_TEMPLATE,
    *,
    special_tokens: SpecialTokens = DEFAULT_SPECIAL_TOKENS,
) -> str:
    """A worker's prompt: segment first (reusable prefix), then the previous CU (control tokens made
    inert), then the question."""
    return template.format(segment=segment, previous_cu=special_tokens.neutralise(previous_cu), question=question)


def manager_prompt(
    cu: str, question: str, template: str = MANAGER_TEMPLATE, *, special_tokens: SpecialTokens = DEFAULT_SPECIAL_TOKENS
) -> str:
    """The manager's prompt: the last CU (control tokens made inert), then the question."""
    return template.format(cu=special_tokens.neutralise(cu), question=question)
