"""A deterministic synthetic corpus for training-step benchmarks and the convergence check.

Nothing is downloaded: token sequences are generated from a seed by a fixed stochastic process over a vocabulary of
``vocab`` tokens, with two rules:

* with probability ``p_skip`` the next token is ``skip[x[t-2]]``, a fixed permutation of the token *two* positions
  back. Predicting it needs attention to an earlier position, so the task exercises the attention layers and the
  linear layers around them, not only the embeddings and the head (a model whose blocks do not learn stays at
  chance on these tokens);
* otherwise it is one of ``fanout`` fixed successors of the previous token (a sparse bigram), chosen uniformly.

The entropy floor of the next-token loss is therefore known (:meth:`SyntheticCorpus.entropy_floor`), and batch ``i``
is the same on every machine and in every precision, so loss curves are comparable step by step.
"""

from __future__ import annotations

import math

import torch


class SyntheticCorpus:
    """Batches of ``[batch, seq + 1]`` int64 tokens (inputs and next-token targets), deterministic per step."""

    def __init__(self, vocab: int, seed: int = 0, p_skip: float = 0.75, fanout: int = 4) -> None:
        if vocab < 2 * fanout:
            raise ValueError(f"vocab = {vocab} too small for fanout = {fanout}; need vocab >= {2 * fanout}")
        if not 0.0 <= p_skip <= 1.0:
            raise ValueError(f"p_skip = {p_skip} must be a probability in [0, 1]")
        self.vocab, self.seed, self.p_skip, self.fanout = vocab, seed, p_skip, fanout
        gen = torch.Generator().manual_seed(seed)
        self.skip = torch.randperm(vocab, generator=gen)
        self.successors = torch.stack([torch.randperm(vocab, generator=gen)[:fanout] for _ in range(vocab)])

    def batch(self, step: int, batch: int, seq: int) -> torch.Tensor:
        """Batch number ``step``: ``[batch, seq + 1]`` tokens (on the CPU)."""
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + step)
        out = torch.empty(batch, seq + 1, dtype=torch.int64)
        out[:, :2] = torch.randint(self.vocab, (batch, 2), generator=gen)
        skip_draw = torch.rand(batch, seq + 1, generator=gen) < self.p_skip
        choice = torch.randint(self.fanout, (batch, seq + 1), generator=gen)
        for t in range(2, seq + 1):
            bigram = self.successors[out[:, t - 1], choice[:, t]]
            out[:, t] = torch.where(skip_draw[:, t], self.skip[out[:, t - 2]], bigram)
        return out

    def entropy_floor(self) -> float:
        """About the lowest expected next-token loss (nats) a model that learns both rules can reach.

        A skip token may coincide with a bigram successor; ignoring that makes this a slight overestimate of the
        true entropy: ``H(p) + (1 - p) * ln(fanout)`` (which rule applies, then the successor's identity).
        """
        p = self.p_skip
        h_rule = 0.0 if p in (0.0, 1.0) else -(p * math.log(p) + (1 - p) * math.log(1 - p))
        return h_rule + (1 - p) * math.log(self.fanout)
