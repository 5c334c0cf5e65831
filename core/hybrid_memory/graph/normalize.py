"""Entity resolution: one key per name, whatever its Unicode form, case, quotes or spacing.

``normalize_name("Café API") == normalize_name("Cafe\u0301 API") == normalize_name("ＣＡＦＥ　ＡＰＩ")
== normalize_name('"Café API "') == "cafe api"``.

NFKC alone maps ``ＣＡＦＥ`` to ``CAFE`` (no accent), so for those four spellings to be one entity the key also drops
Latin combining diacritics (U+0300-U+036F) after canonical decomposition. Marks outside that block are kept, so
Japanese voicing marks (``ガ`` vs ``カ``) and Hangul stay distinct. The display form keeps the accents.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable

__all__ = ["clean_surface", "display_name", "normalize_name", "normalize_type"]

_QUOTES = "\"'`\u2018\u2019\u201a\u201b\u201c\u201d\u201e\u201f\u00ab\u00bb\u2039\u203a\u300c\u300d\u300e\u300f"
_SPACES = re.compile(r"\s+")
_DIACRITICS = re.compile("[\u0300-\u036f]")


def _strip(text: str) -> str:
    # NFKC first: it folds full-width forms and composes combining accents (e + U+0301 -> é).
    text = unicodedata.normalize("NFKC", text)
    previous = None
    while previous != text:  # '" Café API "' has quotes and spaces on both sides, in any nesting
        previous = text
        text = text.strip().strip(_QUOTES)
    return _SPACES.sub(" ", text)


def normalize_name(name: str) -> str:
    """Key of an entity name: NFKC, quotes and spaces trimmed, whitespace collapsed, case-folded, accents dropped.

    Returns "" for a name made only of quotes and spaces (callers drop such entities).
    NFKC is applied again after case folding, since folding can produce non-normalised sequences.
    """
    folded = unicodedata.normalize("NFD", _strip(name).casefold())
    return unicodedata.normalize("NFKC", _DIACRITICS.sub("", folded))


def normalize_type(entity_type: str) -> str:
    """Entity type as stored: NFKC, trimmed, upper case, spaces as underscores ("" when empty)."""
    return _strip(entity_type).upper().replace(" ", "_")


def display_name(surface_forms: Iterable[str]) -> str:
    """Display form of an entity: its most frequent cleaned surface form, ties broken by code-point order.

    ``surface_forms`` holds one item per mention; the result is deterministic whatever their order.
    Raises ValueError when ``surface_forms`` is empty.
    """
    counts = Counter(_strip(s) for s in surface_forms)
    if not counts:
        raise ValueError("display_name() needs at least one surface form")
    return min(counts, key=lambda s: (-counts[s], s))


def clean_surface(name: str) -> str:
    """Surface form kept as an alias: NFKC, quotes and surrounding spaces trimmed, case kept."""
    return _strip(name)
