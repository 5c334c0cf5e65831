"""Tokenizer for technical text: identifiers survive whole and are also split into their parts.

Plain vector search loses error codes, function names and ids; BM25 keeps them only if the tokenizer does.
For each run of word characters joined by ``. _ - / :`` the tokenizer emits:

* the whole run, case-folded and unstemmed, when it is an identifier (has a joiner, a digit, or a
  lower-to-upper case change): ``ERR_CONN_RESET`` -> ``err_conn_reset``, ``v2.3.1``, ``10.0.0.12``,
  ``billing-service``, ``getUserById`` -> ``getuserbyid``, ``E1243:`` -> ``e1243``;
* its parts, split at joiners and at camelCase boundaries, each treated as a plain word:
  ``getUserById`` -> ``get``, ``user``, ``id`` (``by`` is a stop word), so the query ``user id`` finds it;
* plain words case-folded, English stop words removed and Snowball-stemmed with PyStemmer (as bm25s does).

Chinese, Japanese and Korean runs become overlapping character bigrams (a single character stays a
unigram), the usual approach of CJK analyzers such as Lucene's ``CJKAnalyzer``: ``低头思故乡`` ->
``低头 头思 思故 故乡``, so the query ``故乡`` finds it. Text is NFKC-normalised first, so full-width
``ＨＴＴＰ`` is ``http``.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Iterable

from ._bm25s import import_bm25s

__all__ = ["TOKENIZER_VERSION", "TechnicalTokenizer"]

STOPWORDS_EN = import_bm25s("bm25s.stopwords").STOPWORDS_EN
"""bm25s's English stopword list (the one bm25s's own tokenizer uses with ``stopwords=\"en\"``)."""

TOKENIZER_VERSION = 1
"""Bumped whenever the tokens produced change; saved BM25 indexes of another version are rebuilt."""

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN_RE = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+(?:[._\-/:]+[^\W_{_CJK}]+)*")
_CJK_RE = re.compile(rf"[{_CJK}]")
_JOINERS_RE = re.compile(r"[._\-/:]+")
_CAMEL_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+|[^\W\d_A-Za-z]+")
_CASE_CHANGE_RE = re.compile(r"[a-z][A-Z]|[A-Z]{2}[a-z]")


class TechnicalTokenizer:
    """Turns text into BM25 tokens; the same instance must serve documents and queries.

    Args:
        stemmer_language: Snowball language for PyStemmer (default ``"english"``); None disables stemming.
        stopwords: words dropped from plain-word tokens (default: bm25s's English list). Identifiers and
            their whole form are never dropped.

    Thread-safe: PyStemmer stemmers are not, so each thread gets its own.
    """

    def __init__(self, stemmer_language: str | None = "english", stopwords: Iterable[str] | None = None) -> None:
        self.stemmer_language = stemmer_language
        self.stopwords = frozenset(STOPWORDS_EN if stopwords is None else stopwords)
        self._local = threading.local()

    def _stem(self, word: str) -> str:
        if self.stemmer_language is None:
            return word
        cache = getattr(self._local, "cache", None)
        if cache is None:
            import Stemmer  # PyStemmer

            self._local.stemmer = Stemmer.Stemmer(self.stemmer_language)
            cache = self._local.cache = {}
        stem = cache.get(word)
        if stem is None:
            stem = cache[word] = self._local.stemmer.stemWord(word)
            if len(cache) > 200_000:
                cache.clear()
        return stem

    def _plain(self, word: str, out: list[str]) -> None:
        word = word.casefold()
        if word in self.stopwords:
            return
        out.append(self._stem(word) if word.isalpha() else word)

    def tokenize(self, text: str) -> list[str]:
        """Tokens of one text, in order of appearance (a token may repeat: BM25 counts it)."""
        out: list[str] = []
        memo = getattr(self._local, "memo", None)
        if memo is None:
            memo = self._local.memo = {}
        for raw in _TOKEN_RE.findall(unicodedata.normalize("NFKC", text)):
            # the tokens of a run depend on the run alone: words repeat (Zipf), so each is analysed once
            tokens = memo.get(raw)
            if tokens is None:
                tokens = memo[raw] = tuple(self._run_tokens(raw))
                if len(memo) > 200_000:
                    memo.clear()
            out.extend(tokens)
        return out

    def _run_tokens(self, raw: str) -> list[str]:
        """Tokens of one run of word characters (see the module docstring)."""
        out: list[str] = []
        if _CJK_RE.match(raw):
            if len(raw) == 1:
                out.append(raw)
            else:
                out.extend(raw[i : i + 2] for i in range(len(raw) - 1))
            return out
        pieces = _JOINERS_RE.split(raw)
        camel = _CASE_CHANGE_RE.search(raw) is not None
        if len(pieces) == 1 and not camel:
            if raw.isalpha():
                self._plain(raw, out)
            else:
                out.append(raw.casefold())  # letters and digits: E1243, 504, v2
            return out
        out.append(raw.casefold())
        for piece in pieces:
            parts = _CAMEL_RE.findall(piece) if _CASE_CHANGE_RE.search(piece) else [piece]
            if len(parts) > 1 and len(pieces) > 1:
                out.append(piece.casefold())
            for part in parts:
                if part.isalpha():
                    self._plain(part, out)
                else:
                    out.append(part.casefold())
        return out

    def identifiers(self, text: str) -> list[str]:
        """The whole-identifier tokens of ``text``, distinct, in order of appearance.

        An identifier is a run with a joiner (``ERR_CONN_RESET``, ``v2.3.1``, ``billing-service``), a case
        change (``getUserById``) or a digit (``E1243``, ``504``); its token is the whole run case-folded,
        exactly the token :meth:`tokenize` emits for it. Plain words and CJK text are not identifiers.
        """
        out: dict[str, None] = {}
        for raw in _TOKEN_RE.findall(unicodedata.normalize("NFKC", text)):
            if _CJK_RE.match(raw) or raw.isalpha() and not _CASE_CHANGE_RE.search(raw):
                continue
            out.setdefault(raw.casefold())
        return list(out)

    def names(self, text: str, tokens: Iterable[str] | None = None) -> list[str]:
        """What a query names, for the exact-match guard of the default fusion: its :meth:`identifiers`; a query
        without one whose tokens are one distinct token (a word or a CJK pair typed alone: ``kerberos``,
        ``故乡``) names that token. ``tokens``: the text's :meth:`tokenize`, when already at hand.

        Why the lone token: BM25's calibrated evidence for its top hit (``calibration.term_surprise``) is what
        the query tokens the hit holds *together* say beyond chance, ``-ln(n df / N)`` for a single token: at
        most 0 without a filter, however rare the token, since a token held by ``df`` documents is held by
        ``df`` of them by construction. So the calibration cannot favour BM25 on a one-word query, while a
        word typed alone is what the query looks up, as an identifier is (a fresh user's ``故乡`` ranked below an
        unrelated chunk the dense engine preferred).
        """
        found = self.identifiers(text)
        if found:
            return found
        distinct = set(self.tokenize(text) if tokens is None else tokens)
        return list(distinct) if len(distinct) == 1 else []

    def content_runs(self, text: str) -> int:
        """How many runs of ``text`` (words, identifiers, CJK runs) give at least one token: the query's
        content words, stop words left out. ``"ERR_CONN_RESET during the deploy"`` has 2."""
        return sum(1 for raw in _TOKEN_RE.findall(unicodedata.normalize("NFKC", text)) if self.tokenize(raw))

    def tokenize_many(self, texts: Iterable[str]) -> list[list[str]]:
        """Tokens of each text, in input order."""
        return [self.tokenize(text) for text in texts]

    def config(self) -> dict[str, object]:
        """JSON-serialisable description, saved in index manifests to detect a changed tokenizer."""
        return {
            "name": type(self).__name__,
            "version": TOKENIZER_VERSION,
            "stemmer_language": self.stemmer_language,
            "stopwords_sha": _sha(sorted(self.stopwords)),
        }


def _sha(words: list[str]) -> str:
    import hashlib

    return hashlib.sha256("\n".join(words).encode()).hexdigest()[:16]
