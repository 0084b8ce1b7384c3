"""A small TF-IDF retriever (numpy only) for benchmarks that need "any simple retriever"."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

_WORD = re.compile(r"[a-z0-9]+")


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class TfidfRetriever:
    """Cosine similarity over TF-IDF vectors; ``search(query, k)`` returns document indices, best first."""

    def __init__(self, docs: Sequence[str]) -> None:
        self.vocab: dict[str, int] = {}
        rows = []
        for doc in docs:
            counts = Counter(_tokens(doc))
            rows.append({self.vocab.setdefault(w, len(self.vocab)): c for w, c in counts.items()})
        n, v = len(rows), len(self.vocab)
        df = np.zeros(v)
        for r in rows:
            for j in r:
                df[j] += 1
        self.idf = np.log((1 + n) / (1 + df)) + 1.0
        self.matrix = np.zeros((n, v))
        for i, r in enumerate(rows):
            for j, c in r.items():
                self.matrix[i, j] = (1 + np.log(c)) * self.idf[j]
        norms = np.linalg.norm(self.matrix, axis=1, keepdims=True)
        self.matrix /= np.where(norms == 0, 1, norms)

    def search(self, query: str, k: int) -> list[int]:
        q = np.zeros(len(self.vocab))
        for w, c in Counter(_tokens(query)).items():
            j = self.vocab.get(w)
            if j is not None:
                q[j] = (1 + np.log(c)) * self.idf[j]
        scores = self.matrix @ q
        order = np.argsort(-scores, kind="stable")
        return [int(i) for i in order[:k]]
