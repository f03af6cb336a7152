"""TfIdfVectorizer (op-specs/src/text.rs): ORT's counting (strides 1..max_skip_count+1, unigrams once)."""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _rep


def _tf_idf(xs, a):
    x = np.asarray(xs[0]).astype(np.int64)
    rows = x.reshape(1, -1) if x.ndim < 2 else x
    counts, indexes, pool = a["ngram_counts"], a["ngram_indexes"], a["pool_int64s"]
    lo, hi, skip, mode = a["min_gram_length"], a["max_gram_length"], a["max_skip_count"], a["mode"]
    weights = a.get("weights", [1.0] * len(indexes))
    grams, k = [], 0  # (n-gram, k) for the counted lengths
    for i, start in enumerate(counts):
        n, end = i + 1, (counts[i + 1] if i + 1 < len(counts) else len(pool))
        for g in range(start, end, n):
            if lo <= n <= hi:
                grams.append((tuple(pool[g:g + n]), k))
            k += 1
    out = np.zeros((len(rows), max(indexes) + 1), np.float32)
    for r, row in enumerate(rows):
        found = {}
        for stride in range(1, skip + 2):
            for gram, kk in grams:
                n = len(gram)
                if n == 1 and stride > 1:
                    continue
                for i in range(len(row) - (n - 1) * stride):
                    if tuple(row[i:i + (n - 1) * stride + 1:stride]) == gram:
                        found[kk] = found.get(kk, 0) + 1
        for kk, c in found.items():
            slot = indexes[kk]
            out[r, slot] += c if mode == "TF" else c * weights[kk] if mode == "TFIDF" else 0
            if mode == "IDF":
                out[r, slot] = weights[kk]
    return out if x.ndim == 2 else out[0]


def _tokens(dtype, shape, rng, dtypes):
    """Ids 0..4, so that the pool's n-grams occur, some at every stride."""
    return rng.integers(0, 5, size=shape).astype(np.int64 if dtype == "int64" else np.int32)


_POOL = {"ngram_counts": [0, 3], "pool_int64s": [1, 2, 3, 1, 2, 2, 3], "ngram_indexes": [0, 1, 2, 3, 4],
         "min_gram_length": 1, "max_gram_length": 2, "max_skip_count": 1, "mode": "TF"}

SPECS[("", "TfIdfVectorizer")] = OpSpec(
    ref=_tf_idf, domains={"X": _tokens},
    scheme={"basic": [[2, 9]], "vector": [[11]], "empty": [[2, 0]],
            "dynamic": [[[2, 9]], [[1, 4]], [[3, 12]]]},
    variants=[
        Variant("tf", _POOL),
        _rep(Variant("tfidf_weights", {**_POOL, "mode": "TFIDF", "weights": [0.5, 2.0, 1.0, 3.0, 0.25]})),
        _rep(Variant("idf_weights", {**_POOL, "mode": "IDF", "weights": [0.5, 2.0, 1.0, 3.0, 0.25]})),
        _rep(Variant("bigrams_only_strides_to_3", {**_POOL, "min_gram_length": 2, "max_skip_count": 2})),
        _rep(Variant("shared_and_wide_slots", {**_POOL, "ngram_indexes": [0, 0, 1, 6, 1]})),
        _rep(Variant("trigrams", {"ngram_counts": [0, 2, 4], "pool_int64s": [1, 2, 1, 2, 1, 2, 3, 2, 3, 1],
                                  "ngram_indexes": [0, 1, 2, 3, 4], "min_gram_length": 3, "max_gram_length": 3,
                                  "max_skip_count": 2, "mode": "TF"}, shapes=[[2, 12]])),
    ],
)
