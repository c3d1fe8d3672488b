"""Batch samplers: which images each rank sees, in which batches, in a resumable order.

``TrainBatchSampler`` is a pure function of (seed, epoch, world size, rank) plus a position: every
epoch it shuffles all indices with a generator seeded by (seed, epoch), deals them round-robin to
the ranks, groups each rank's stream by aspect ratio (landscape/portrait) into batches, and cuts
every rank to the same number of batches (each rank computes all ranks' lists, so no
communication is needed and DDP never waits on a rank that ran out).  Every item carries its own
augmentation seed.  The trainer, not the sampler, counts consumed batches (DataLoader workers read
ahead) and hands (epoch, position) back via ``set_state`` on resume.
"""
from __future__ import annotations

from typing import Iterator, Sequence

import torch

Item = tuple[int, int]  # (dataset index, augmentation seed)


class TrainBatchSampler:
    def __init__(self, groups: Sequence[int], batch_size: int, *, rank: int, world_size: int,
                 seed: int, grouping: bool = True):
        self.groups = list(groups)
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        self.grouping = grouping
        self.epoch = 0
        self.start = 0

    def _rank_batches(self, order: list[int], seeds: list[int], rank: int) -> list[list[Item]]:
        buckets: dict[int, list[Item]] = {}
        out = []
        for idx in order[rank::self.world_size]:
            key = self.groups[idx] if self.grouping else 0
            b = buckets.setdefault(key, [])
            b.append((idx, seeds[idx]))
            if len(b) == self.batch_size:
                out.append(b)
                buckets[key] = []
        return out

    def epoch_batches(self, epoch: int) -> list[list[Item]]:
        """This rank's batches for ``epoch``, as long as the shortest rank's list."""
        g = torch.Generator().manual_seed(self.seed * 100003 + epoch)
        order = torch.randperm(len(self.groups), generator=g).tolist()
        seeds = torch.randint(0, 2**31 - 1, (len(self.groups),), generator=g).tolist()
        per_rank = [self._rank_batches(order, seeds, r) for r in range(self.world_size)]
        n = min(len(b) for b in per_rank)
        return per_rank[self.rank][:n]

    def set_state(self, epoch: int, position: int) -> None:
        """Next ``__iter__`` yields ``epoch``'s batches from index ``position`` on."""
        self.epoch, self.start = epoch, position

    def __iter__(self) -> Iterator[list[Item]]:
        yield from self.epoch_batches(self.epoch)[self.start:]

    def __len__(self) -> int:
        return len(self.epoch_batches(self.epoch)) - self.start


class EvalBatchSampler:
    """Rank ``r`` evaluates indices r, r+W, ...; results are gathered to rank 0 afterwards."""

    def __init__(self, n: int, batch_size: int, *, rank: int, world_size: int):
        self.indices = list(range(rank, n, world_size))
        self.batch_size = batch_size

    def __iter__(self) -> Iterator[list[int]]:
        for i in range(0, len(self.indices), self.batch_size):
            yield self.indices[i:i + self.batch_size]

    def __len__(self) -> int:
        return (len(self.indices) + self.batch_size - 1) // self.batch_size
