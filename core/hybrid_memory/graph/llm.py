"""Chat models as ``Callable[[str], str]``, and JSON that survives real model output.

``parse_llm_json`` is a pure function: it strips code fences and preamble, takes the outermost ``{...}`` or
``[...]``, and closes a reply cut short (dropping its unfinished last element); the malformed JSON models write
(trailing commas, single quotes, unquoted keys, missing commas, comments, Python literals) is repaired by the
``json-repair`` library (MIT). Validators (``validate_extraction``, ``validate_report``, ``validate_points``) stay
the guard: a repaired value that lacks what they need is refused like any other.
``call_json`` calls a model, parses and validates, and retries once with the error in the prompt.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeVar

from .errors import INSTALL_HINT, LLMOutputError, MissingDependencyError
from .tokens import count_tokens

logger = logging.getLogger(__name__)

__all__ = ["JsonCall", "LLMCallable", "as_llm_callable", "call_json", "parse_llm_json"]

LLMCallable = Callable[[str], str]
T = TypeVar("T")

_FENCE = re.compile(r"```[a-zA-Z0-9_-]*[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_CLOSER = {"{": "}", "[": "]"}


def as_llm_callable(model: Any) -> LLMCallable:
    """Wrap a chat model as ``prompt -> text``, without importing any framework.

    Accepts, duck-typed: a LangChain ``BaseChatModel``/``BaseLanguageModel`` (``.invoke(prompt)`` returning a
    message with ``.content``, or a str), a LlamaIndex ``LLM`` (``.complete(prompt).text``), or a plain callable
    returning str. Raises TypeError for anything else.
    """
    if hasattr(model, "invoke") and callable(model.invoke):

        def _invoke(prompt: str) -> str:
            return _content_text(model.invoke(prompt))

        return _invoke
    if hasattr(model, "complete") and callable(model.complete):

        def _complete(prompt: str) -> str:
            return _content_text(model.complete(prompt))

        return _complete
    if callable(model):

        def _call(prompt: str) -> str:
            return _content_text(model(prompt))

        return _call
    raise TypeError(
        f"expected a callable prompt -> str, a LangChain chat model or a LlamaIndex LLM, got {type(model).__name__}"
    )


def _content_text(reply: Any) -> str:
    if isinstance(reply, str):
        return reply
    for attribute in ("content", "text"):
        value = getattr(reply, attribute, None)
        if isinstance(value, str):
            return value
        if isinstance(value, list):  # LangChain content blocks
            return "".join(b if isinstance(b, str) else str(b.get("text", "")) for b in value)
    raise TypeError(f"model reply has no text: {type(reply).__name__}")


def _walk(text: str) -> Iterator[tuple[int, str, bool]]:
    """Yield (position, character, inside_string_after_it) over JSON text, honouring escapes. A character is
    structural (a bracket or comma that counts) when it is not a quote and the walk is not inside a string."""
    inside = escaped = False
    for i, ch in enumerate(text):
        if inside:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                inside = False
        elif ch == '"':
            inside = True
        yield i, ch, inside


def _scan(text: str) -> tuple[list[str], bool, list[tuple[int, tuple[str, ...]]], int | None]:
    """Walk JSON text: returns (open stack at the end, inside a string?, [(comma pos, stack)], end of top value)."""
    stack: list[str] = []
    commas: list[tuple[int, tuple[str, ...]]] = []
    inside = False
    for i, ch, inside in _walk(text):
        if inside or ch == '"':
            continue
        if ch in "{[":
            stack.append(ch)
        elif ch in "}]":
            if stack and _CLOSER[stack[-1]] == ch:
                stack.pop()
                if not stack:
                    return [], False, commas, i
        elif ch == ",":
            commas.append((i, tuple(stack)))
    return stack, inside, commas, None


def _closers(stack: tuple[str, ...] | list[str]) -> str:
    return "".join(_CLOSER[c] for c in reversed(stack))


def parse_llm_json(text: str) -> Any:
    """Parse the JSON object or array in a model reply.

    Handles code fences (```json ... ```), preamble and trailing prose, a reply cut short (the unfinished last
    element is dropped, never completed into a made-up value, and the open brackets closed), and malformed JSON
    repaired by ``json_repair.loads`` (trailing commas, single quotes, unquoted keys, missing commas, comments).
    Every fenced block and every ``{`` / ``[`` position (the first 20) is tried and the longest value wins
    (strict JSON before a repaired value of the same length), so ``Result [1]: {...}`` or a preamble quoting ``{text}``
    still yields the real object. Returns the parsed dict or list. Raises LLMOutputError (a ValueError) with the
    reason when nothing parseable is left.
    """
    if not isinstance(text, str):
        raise LLMOutputError(f"model reply is {type(text).__name__}, not text")
    bodies = [m.group(1) for m in _FENCE.finditer(text) if re.search(r"[{\[]", m.group(1))] + [text]
    best: tuple[int, bool, Any] | None = None
    error: Exception | None = None
    for body in bodies:
        starts = [i for i, ch in enumerate(body) if ch in "{["][:20]
        for start in starts:
            try:
                strict, span, value = _parse_from(body[start:])
            except LLMOutputError as exc:
                error = error or exc
                continue
            if best is None or (span, strict) > best[:2]:
                best = (span, strict, value)
    if best is not None:
        return best[2]
    if error is None:
        raise LLMOutputError("no JSON object or array in the model reply")
    raise error


@lru_cache(maxsize=1)
def _repair() -> Callable[[str], Any]:
    try:
        from json_repair import loads
    except ImportError as exc:
        raise MissingDependencyError(f"repairing model JSON needs json-repair: {INSTALL_HINT}") from exc
    return loads


def _load(candidate: str) -> tuple[bool, Any]:
    """(strict, value): ``json.loads`` when the text is valid JSON, else ``json_repair.loads``; raises
    LLMOutputError unless the result is an object or an array."""
    try:
        return True, json.loads(candidate)
    except json.JSONDecodeError as exc:
        strict_error = exc
    try:
        value = _repair()(candidate)
    except (ValueError, RecursionError, IndexError, TypeError) as exc:  # json-repair gave up
        raise LLMOutputError(f"invalid JSON in the model reply: {strict_error}") from exc
    if not isinstance(value, (dict, list)):
        raise LLMOutputError(f"invalid JSON in the model reply: {strict_error}")
    return False, value


def _parse_from(body: str) -> tuple[bool, int, Any]:
    """Parse the JSON value that starts at body[0]; returns (strict JSON?, characters used, value).
    Raises LLMOutputError."""
    stack, in_string, commas, end = _scan(body)
    if end is not None:
        candidates = [body[: end + 1]]
    else:  # cut short: try closing as is, then dropping the unfinished tail element by element
        candidates = [] if in_string else [body.rstrip() + _closers(stack)]
        candidates += [body[:pos] + _closers(st) for pos, st in reversed(commas[-50:])]
        candidates.append(body[0] + _closers([body[0]]))
    error: Exception | None = None
    for candidate in candidates:
        try:
            strict, value = _load(candidate)
        except LLMOutputError as exc:
            error = error or exc
            continue
        return strict and end is not None, len(candidate), value
    raise error if isinstance(error, LLMOutputError) else LLMOutputError("invalid JSON in the model reply")


@dataclass
class JsonCall:
    """Result of ``call_json``: the validated value and what it cost."""

    value: Any
    """Whatever ``validate`` returned."""
    attempts: int
    """Model calls made (1, or 2 after a retry)."""
    prompt_tokens: int
    """Tokens sent, all attempts."""
    completion_tokens: int
    """Tokens received, all attempts."""


def call_json(llm: LLMCallable, prompt: str, validate: Callable[[Any], T], *, retries: int = 1) -> JsonCall:
    """Call ``llm`` and return ``validate(parse_llm_json(reply))``, retrying ``retries`` times with the error.

    ``validate`` raises ValueError (pydantic's ValidationError is one) for a parsed but unusable reply.
    The retry prompt is the original prompt followed by the error and the bad reply's first 500 characters.
    Raises LLMOutputError after the last attempt; exceptions raised by ``llm`` itself propagate unchanged.
    """
    attempts = prompt_tokens = completion_tokens = 0
    current = prompt
    last_error = ""
    for attempt in range(retries + 1):
        attempts += 1
        prompt_tokens += count_tokens(current)
        reply = llm(current)
        completion_tokens += count_tokens(reply if isinstance(reply, str) else "")
        try:
            value = validate(parse_llm_json(reply))
        except ValueError as exc:
            last_error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            logger.debug("model reply unusable (attempt %d): %s", attempt + 1, last_error)
            current = (
                f"{prompt}\n\nYour previous reply could not be used: {last_error}\n"
                f"Previous reply (start): {str(reply)[:500]}\n"
                "Reply again with only the JSON, in the format above, and nothing else."
            )
            continue
        return JsonCall(value, attempts, prompt_tokens, completion_tokens)
    raise LLMOutputError(
        f"model reply unusable after {attempts} attempts: {last_error}",
        attempts=attempts,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
    )
