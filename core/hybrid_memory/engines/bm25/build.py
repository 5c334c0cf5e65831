"""Vectorised construction of a bm25s index from token-id arrays: the same matrix as ``bm25s.BM25.index``.

bm25s builds its precomputed score matrix in a Python loop over documents (a ``Counter`` per document and a
set intersection per document for the document frequencies), from token ids given as lists of Python ints.
At a million documents of 60 tokens that is minutes of CPU and gigabytes of Python ints. This module computes
the identical matrix with a few numpy/scipy passes over one int32 array of all tokens:

* count the (document, token) pairs into a sparse CSC matrix (scipy; a counting sort by token that keeps
  documents ascending within a token, summing repeats into the term frequencies ``tf(t, d)``): exactly the
  layout (``data``, ``indices``, ``indptr``) bm25s keeps in ``BM25.scores``;
* Lucene BM25 (Kamphuis et al., ECIR 2020), as bm25s's ``method="lucene"``::

      idf(t)    = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))                     float32, as bm25s
      s(t, d)   = idf(t) · tf / (k1 · ((1 - b) + b · |d| / avgdl) + tf)          float64, stored float32

  with the same floating-point operations in the same order as ``bm25s.scoring`` (Lù 2024), so scores
  are bit-identical (``tests/engines/bm25/test_bm25_build.py`` checks it against ``bm25s.BM25.index``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..._bm25s import import_bm25s

__all__ = ["build_bm25s", "lucene_scores"]


def lucene_scores(tokens: np.ndarray, lengths: np.ndarray, n_vocab: int, k1: float, b: float) -> dict[str, Any]:
    """The CSC score matrix of bm25s (``BM25.scores``) for documents given as one token array.

    Args:
        tokens: int32 (total tokens,), the documents' token ids one document after another, each < ``n_vocab``.
        lengths: int64 (n_docs,), tokens per document (their sum is ``len(tokens)``).
        n_vocab: vocabulary size (columns of the matrix).
        k1, b: BM25 parameters.

    Returns:
        ``{"data": float32 (nnz,), "indices": int32 (nnz,) document rows, "indptr": int32/int64 (n_vocab + 1,),
        "num_docs": n_docs}``, as ``bm25s.BM25.index`` builds with ``method="lucene"``.

    Raises:
        ValueError: ``lengths`` does not add up to ``len(tokens)`` or a token id is out of range.
    """
    tokens = np.asarray(tokens)
    lengths = np.asarray(lengths, dtype=np.int64)
    n_docs = len(lengths)
    if int(lengths.sum()) != len(tokens):
        raise ValueError(f"lengths add up to {int(lengths.sum())}, not {len(tokens)} tokens")
    if len(tokens) and (int(tokens.min()) < 0 or int(tokens.max()) >= n_vocab):
        raise ValueError("token ids must be in [0, n_vocab)")
    # (document, token) occurrences -> CSC counts: scipy's COO -> CSC conversion is a counting sort by token
    # that keeps the documents' order (ascending) within a token, and sums repeated pairs into tf
    from scipy import sparse

    doc = np.repeat(np.arange(n_docs, dtype=np.int32), lengths)
    counts = sparse.csc_matrix(
        (np.ones(len(tokens), dtype=np.float32), (doc, tokens)), shape=(n_docs, n_vocab), dtype=np.float32
    )
    del doc
    counts.sum_duplicates()
    tf = counts.data.astype(np.float64)
    doc_of = counts.indices
    df = np.diff(counts.indptr).astype(np.int64)
    token_of = np.repeat(np.arange(n_vocab, dtype=np.int64), df)
    del counts
    idf = np.zeros(n_vocab, dtype=np.float32)
    nonzero = np.flatnonzero(df)
    # math.log per token, as bm25s's _score_idf_lucene, so idf is bit-identical
    idf[nonzero] = [math.log(1 + (n_docs - d + 0.5) / (d + 0.5)) for d in df[nonzero].tolist()]
    avg_doc_len = lengths.mean() if n_docs else np.float64(0.0)
    norm = k1 * ((1 - b) + b * lengths[doc_of] / avg_doc_len)
    data = (idf[token_of].astype(np.float64) * (tf / (norm + tf))).astype(np.float32)
    del norm, tf
    index_dtype = np.int32 if len(data) < 2**31 and n_docs < 2**31 else np.int64
    indptr = np.zeros(n_vocab + 1, dtype=index_dtype)
    np.cumsum(df, out=indptr[1:])
    return {"data": data, "indices": doc_of.astype(index_dtype), "indptr": indptr, "num_docs": n_docs}


def build_bm25s(documents: Sequence[np.ndarray], vocab: Mapping[str, int], *, k1: float, b: float) -> Any:
    """A ``bm25s.BM25`` (``method="lucene"``) over int32 token-id arrays, one per document, with ``vocab``.

    Args:
        documents: int32 token-id arrays (ids are values of ``vocab``, which must be 0..len(vocab)-1 and hold
            ``""``, bm25s's empty-document token).
        vocab: token -> id (kept as the index's ``vocab_dict``).

    Returns:
        A ``bm25s.BM25`` equal to ``BM25(k1=k1, b=b, method="lucene").index((documents as lists, vocab))``.
    """
    bm25s = import_bm25s()

    lengths = np.fromiter((len(d) for d in documents), dtype=np.int64, count=len(documents))
    tokens = np.concatenate(documents).astype(np.int32, copy=False) if len(documents) else np.zeros(0, np.int32)
    segment = bm25s.BM25(k1=k1, b=b, method="lucene")
    segment.scores = lucene_scores(tokens, lengths, len(vocab), k1, b)
    segment.vocab_dict = dict(vocab)
    segment.unique_token_ids_set = set(segment.vocab_dict.values())
    segment.nonoccurrence_array = None
    return segment
