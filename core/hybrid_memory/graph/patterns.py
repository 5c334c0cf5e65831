"""Offline extractor: entities of technical and encyclopedic text by rules, relations by co-occurrence.

No model: regular expressions find services (``billing-service``, ``auth-api``), hosts and IPs (``db-prod-3``,
``10.0.0.12``), error codes (``ERR_CONN_RESET``, ``E1243``, ``ETIMEDOUT``, ``TimeoutError``), HTTP statuses
(``HTTP 504`` -> "HTTP 504"), functions (``getUserById()``), tables (``pg_stat_activity``), versions (``v2.3.1``),
and capitalised multi-word proper nouns (``Scott Derrickson``, ``Ed Wood``) plus capitalised single words that do
not open a sentence (``Gallu``). Two entities found in the same sentence are related ("co-occurs with"), with a
strength equal to the number of sentences of the chunk in which they co-occur.
"""

from __future__ import annotations

import re
from collections import Counter

from .models import ExtractedEntity, ExtractedRelation
from .normalize import normalize_name

__all__ = ["OfflineExtractor", "split_sentences"]

CO_OCCURS = "co-occurs with"

_SENTENCE = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[^\W_])|\n\s*\n|\n(?=\s*[-*#>|])|(?<=[:;])\n")
_HTTP_NAMES = (
    r"Bad Request|Unauthorized|Forbidden|Not Found|Conflict|Too Many Requests|Internal Server Error|"
    r"Bad Gateway|Service Unavailable|Gateway Timeout"
)
# (type, pattern, group holding the name); earlier rules win overlapping spans.
_RULES: list[tuple[str, re.Pattern[str], int]] = [
    ("HTTP_STATUS", re.compile(r"\bHTTP(?:/\d(?:\.\d)?)?[ /:-]?([1-5]\d\d)\b"), 1),
    ("HTTP_STATUS", re.compile(rf"\b([1-5]\d\d)\s+(?:{_HTTP_NAMES})\b"), 1),
    ("HTTP_STATUS", re.compile(r"\b(?:status(?: code)?|returned|returns|got)\s+([1-5]\d\d)\b", re.I), 1),
    ("HOST", re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d{2,5})?\b"), 0),
    ("VERSION", re.compile(r"\bv\d+(?:\.\d+){1,3}(?:-[0-9A-Za-z.]+)?\b|\b\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?\b"), 0),
    ("FUNCTION", re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\(\)"), 0),
    (
        "SERVICE",
        re.compile(
            r"\b[a-z][a-z0-9]*(?:-[a-z0-9]+)*-(?:service|svc|api|gateway|worker|server|proxy|queue|cache|daemon|"
            r"scheduler|consumer|producer|frontend|backend|app|indexer|router|controller|manager|monitor|broker|"
            r"exporter|collector|agent|store)\b"
        ),
        0,
    ),
    (
        "HOST",
        re.compile(
            r"\b(?:[a-z][a-z0-9]*-)+(?:prod|production|staging|stg|dev|qa|test)(?:-[a-z0-9]+)*\b|"
            r"\b(?:db|pg|mysql|redis|kafka|web|app|api|cache|node|host|srv|worker|lb|es)-[a-z0-9-]*\d\b|"
            r"\b[a-z][a-z0-9-]*(?:\.[a-z0-9-]+)+\.(?:internal|local|lan|corp)\b"
        ),
        0,
    ),
    (
        "ERROR_CODE",
        re.compile(
            r"\b(?:ERR|ERROR|E)_[A-Z0-9_]+\b|\bE\d{3,5}\b|"
            r"\bE(?:CONN[A-Z]+|TIMEDOUT|NOENT|PIPE|ACCES|ADDRINUSE|HOSTUNREACH|NOTFOUND)\b"
        ),
        0,
    ),
    ("ERROR_CODE", re.compile(r"\b[A-Z][A-Za-z0-9]*(?:Error|Exception|Timeout)\b"), 0),
    ("CONSTANT", re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b"), 0),
    ("TABLE", re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b(?!\()"), 0),
]
_WORD = re.compile(r"[^\W\d_](?:[\w'’&.-]*[\w])?|\S")
_CONNECTORS = {"of", "de", "du", "des", "van", "von", "der", "den", "la", "le", "del", "da", "di", "y", "bin", "al"}
_STOP = set(
    """a an the this that these those it its he she his her they their them we our you your i in on at of for from to
    by with as and or but if when while after before during since until although though because however also then
    there here what which who whom whose where why how all any each every some many most several such no not yes
    is was are were be been being has have had do does did can could will would shall should may might must
    january february march april may june july august september october november december monday tuesday wednesday
    thursday friday saturday sunday mr mrs ms dr st""".split()
)


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``: split after ``.!?`` followed by space and a letter, at blank lines and list items.

    Dots inside tokens (``v2.3.1``, ``10.0.0.12``, ``getUser()``) never split. Returns non-empty stripped strings.
    """
    return [s.strip() for s in _SENTENCE.split(text) if s and s.strip()]


def _proper_nouns(sentence: str, masked: list[tuple[int, int]]) -> list[str]:
    names: list[str] = []
    group: list[str] = []
    pending: list[str] = []  # connectors seen after a capitalised word
    first_word_start: int | None = None

    def flush() -> None:
        words = list(group)
        while words and words[0].casefold() in _STOP:
            words.pop(0)
        if len(words) >= 2 or (len(words) == 1 and len(words[0]) >= 3 and not group_is_initial[0]):
            if len(words) == 1 and words[0].casefold() in _STOP:
                pass
            else:
                names.append(" ".join(words))
        group.clear()
        pending.clear()

    group_is_initial = [False]
    for m in _WORD.finditer(sentence):
        token, start = m.group(0), m.start()
        if any(a <= start < b for a, b in masked):
            flush()
            continue
        if first_word_start is None and token[0].isalpha():
            first_word_start = start
        if token[0].isalpha() and token[0].isupper():
            if not group:
                group_is_initial[0] = start == first_word_start
            group.extend(pending)
            pending.clear()
            group.append(token.rstrip("."))
        elif group and token.casefold() in _CONNECTORS:
            pending.append(token)
        else:
            flush()
    flush()
    return names


class OfflineExtractor:
    """Rule-based extractor for technical text (and capitalised names in general text); needs no model.

    ``proper_nouns``: also find capitalised names (off for logs and code-only memories where they add noise).
    Deterministic: the same text gives the same entities and relations in the same order.
    """

    def __init__(self, *, proper_nouns: bool = True):
        self.proper_nouns = proper_nouns
        self.name = "offline-rules" + ("" if proper_nouns else "-technical")

    def entities_in(self, sentence: str) -> list[tuple[str, str]]:
        """(surface form, type) of the entities of one sentence, in order of first appearance."""
        found: list[tuple[int, str, str]] = []
        masked: list[tuple[int, int]] = []
        for entity_type, pattern, group in _RULES:
            for m in pattern.finditer(sentence):
                start, end = m.span()
                if any(a < end and start < b for a, b in masked):
                    continue
                masked.append((start, end))
                name = m.group(group)
                if entity_type == "HTTP_STATUS":
                    name = f"HTTP {name}"
                found.append((start, name, entity_type))
        if self.proper_nouns:
            for name in _proper_nouns(sentence, masked):
                found.append((sentence.find(name), name, "PROPER_NOUN"))
        found.sort(key=lambda t: (t[0], t[1]))
        return [(name, entity_type) for _, name, entity_type in found]

    def extract(self, text: str) -> tuple[list[ExtractedEntity], list[ExtractedRelation]]:
        """Entities (one per distinct surface form and type, in order of first appearance) and co-occurrence
        relations (source/target in normalised-key order, strength = number of sentences sharing them)."""
        entities: dict[tuple[str, str], ExtractedEntity] = {}
        pair_counts: Counter[tuple[str, str]] = Counter()
        surface: dict[str, str] = {}
        for sentence in split_sentences(text):
            keys: dict[str, str] = {}
            for name, entity_type in self.entities_in(sentence):
                key = normalize_name(name)
                if not key:
                    continue
                entities.setdefault((name, entity_type), ExtractedEntity(name=name, type=entity_type))
                keys.setdefault(key, name)
                surface.setdefault(key, name)
            ordered = sorted(keys)
            for i, a in enumerate(ordered):
                for b in ordered[i + 1 :]:
                    pair_counts[(a, b)] += 1
        relations = [
            ExtractedRelation(source=surface[a], target=surface[b], description=CO_OCCURS, strength=float(n))
            for (a, b), n in sorted(pair_counts.items())
        ]
        return list(entities.values()), relations
