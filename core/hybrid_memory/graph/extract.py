"""Extractor protocol and the LLM extractor (entities and relations as JSON).

The prompt follows the entity/relationship extraction step of Edge et al. 2024 ("From Local to Global: A Graph
RAG Approach to Query-Focused Summarization"), asking for JSON instead of delimited tuples.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from .llm import LLMCallable, as_llm_callable, call_json
from .models import ExtractedEntity, ExtractedRelation

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_ENTITY_TYPES", "Extraction", "Extractor", "LLMExtractor", "validate_extraction"]

Extraction = tuple[list[ExtractedEntity], list[ExtractedRelation]]

DEFAULT_ENTITY_TYPES = (
    "SERVICE",
    "HOST",
    "DATABASE",
    "TABLE",
    "FUNCTION",
    "ERROR_CODE",
    "HTTP_STATUS",
    "VERSION",
    "PERSON",
    "ORGANIZATION",
    "LOCATION",
    "EVENT",
    "CONCEPT",
)

EXTRACTION_PROMPT = """-Goal-
Given a text and a list of entity types, identify all entities of those types in the text and all relationships
among the identified entities.

-Entity types-
{entity_types}

-Output-
Reply with one JSON object and nothing else:
{{"entities": [{{"name": "<name as written>", "type": "<one of the entity types>", "description": "<what the text says about it>"}}],
 "relations": [{{"source": "<entity name>", "target": "<entity name>", "description": "<how they are related>", "strength": <integer 1-10>}}]}}

-Text-
{text}
"""


@runtime_checkable
class Extractor(Protocol):
    """Finds entities and relations in the text of one chunk."""

    name: str
    """Stable identifier, saved in the graph manifest."""

    def extract(self, text: str) -> Extraction:
        """Return (entities, relations) found in ``text``. Raises LLMOutputError when a model reply is unusable."""
        ...


_UNSAFE_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


def _text(item: dict[str, Any], key: str) -> str:
    """The item's text field, stripped, with characters GraphML/XML cannot hold (controls, surrogates) removed."""
    value = item.get(key, "")
    text = value if isinstance(value, str) else ("" if value is None else str(value))
    return _UNSAFE_CHARS.sub("", text).strip()


def validate_extraction(data: Any) -> Extraction:
    """Turn parsed model JSON into records, leniently per item, strictly for the shape.

    Raises ValueError when ``data`` is not an object with list-valued ``entities``/``relations``, or when it holds
    neither key. Items without a name (or a relation without both ends) are skipped and logged; a missing or
    non-positive strength becomes 1.0; a strength above 10 is kept as given.
    """
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object with 'entities' and 'relations', got {type(data).__name__}")
    if "entities" not in data and "relations" not in data:
        raise ValueError("the JSON object has neither 'entities' nor 'relations'")
    raw_entities, raw_relations = data.get("entities", []), data.get("relations", [])
    if not isinstance(raw_entities, list) or not isinstance(raw_relations, list):
        raise ValueError("'entities' and 'relations' must be JSON arrays")
    entities: list[ExtractedEntity] = []
    for item in raw_entities:
        if isinstance(item, dict) and _text(item, "name"):
            entities.append(
                ExtractedEntity(
                    name=_text(item, "name"), type=_text(item, "type"), description=_text(item, "description")
                )
            )
        else:
            logger.debug("skipping entity without a name: %r", item)
    relations: list[ExtractedRelation] = []
    for item in raw_relations:
        if not (isinstance(item, dict) and _text(item, "source") and _text(item, "target")):
            logger.debug("skipping relation without both ends: %r", item)
            continue
        try:
            strength = float(item.get("strength", 1.0))
        except (TypeError, ValueError):
            strength = 1.0
        relations.append(
            ExtractedRelation(
                source=_text(item, "source"),
                target=_text(item, "target"),
                description=_text(item, "description"),
                strength=strength if strength > 0 else 1.0,
            )
        )
    return entities, relations


class LLMExtractor:
    """Entities (name, type, description) and relations (source, target, description, strength) from a chat model.

    ``model``: a LangChain chat model, a LlamaIndex LLM or any ``prompt -> str`` callable (see ``as_llm_callable``).
    A reply that is not usable JSON is retried once with the parse error; after that ``extract`` raises
    LLMOutputError and the index records the chunk as failed (retried by ``GraphIndex.retry_failed``).
    """

    def __init__(self, model: Any, *, entity_types: Sequence[str] = DEFAULT_ENTITY_TYPES, retries: int = 1):
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.llm: LLMCallable = as_llm_callable(model)
        self.entity_types = tuple(entity_types)
        self.retries = retries
        self.name = "llm"
        self.calls = 0
        """Model calls made so far, retries included."""

    def extract(self, text: str) -> Extraction:
        """See ``Extractor.extract``. Raises LLMOutputError after the retry."""
        prompt = EXTRACTION_PROMPT.format(entity_types=", ".join(self.entity_types), text=text)
        try:
            result = call_json(self.llm, prompt, validate_extraction, retries=self.retries)
        except Exception as exc:
            self.calls += getattr(exc, "attempts", 1)
            raise
        self.calls += result.attempts
        return result.value
