"""A genetic-algorithm tuner (AutoTVM's ``GATuner``): no model, a population that breeds.

A configuration's genes are its knob digits. The first generation is ``pop_size`` random
configs; each next one keeps the ``elite_num`` fittest measured configs and fills the rest with
children: two parents drawn with probability proportional to their measured throughput, each
gene taken from either parent, then changed to a random value with probability
``mutation_prob``. Children already measured (or twice in a generation) are mutated again,
or replaced by a random config, so every trial is a new config.
"""
from __future__ import annotations

import numpy as np

from .tuner import Tuner


class GATuner(Tuner):
    """Genetic search over the knob digits.

    >>> GATuner(task, pop_size=32, seed=0).tune(256, measure_option)
    """

    def __init__(self, task, pop_size: int = 100, elite_num: int = 3, mutation_prob: float = 0.1,
                 seed: int | None = None):
        super().__init__(task, seed)
        if not 0 <= elite_num <= pop_size:
            raise ValueError(f"GATuner: elite_num must be between 0 and pop_size ({pop_size}), got {elite_num}")
        self.pop_size = min(pop_size, len(self.space))
        self.elite_num = elite_num
        self.mutation_prob = mutation_prob
        self.dims = self.space.dims
        self.fitness: dict[int, float] = {}        # measured config -> FLOP/s
        self.generation: list[int] = []            # configs still to measure in this generation
        self._started = False

    def _random_generation(self) -> list[int]:
        return [int(i) for i in self.space.sample_ints(self.pop_size, self.rng) if int(i) not in self.visited]

    def _breed(self) -> list[int]:
        measured = sorted(self.fitness.items(), key=lambda kv: -kv[1])
        if not measured:
            return self._random_generation()
        elites = [i for i, _ in measured[: self.elite_num]]
        pool = [i for i, _ in measured[: max(self.pop_size, self.elite_num)]]
        scores = np.array([self.fitness[i] for i in pool], dtype=np.float64)
        probs = scores / scores.sum() if scores.sum() > 0 else np.full(len(pool), 1.0 / len(pool))
        genes = [self.space.point2knob(i) for i in pool]
        children: list[int] = []
        taken = set(self.visited)
        tries = 0
        while len(children) < self.pop_size - len(elites) and tries < 20 * self.pop_size:
            tries += 1
            a, b = self.rng.choice(len(pool), size=2, p=probs)
            child = [genes[a][k] if self.rng.random() < 0.5 else genes[b][k] for k in range(len(self.dims))]
            for k, d in enumerate(self.dims):
                if d > 1 and self.rng.random() < self.mutation_prob:
                    child[k] = int(self.rng.integers(d))
            point = self.space.knob2point(child)
            if point in taken or not self.space.is_index_valid(point):
                continue
            taken.add(point)
            children.append(point)
        while len(children) < self.pop_size - len(elites):      # a converged population: go random
            point = self._random_unvisited()
            if point is None or point in taken:
                break
            taken.add(point)
            children.append(point)
        return children

    def next_batch(self, batch_size):
        batch = []
        while len(batch) < batch_size and len(self.visited) + len(batch) < len(self.space):
            if not self.generation:
                if self._started and any(i in self.fitness for i in [c.index for c in batch]):
                    break           # measure what is in the batch before breeding from it
                self.generation = self._breed() if self._started else self._random_generation()
                self._started = True
                if not self.generation:
                    break
            i = self.generation.pop(0)
            if i not in self.visited and all(c.index != i for c in batch):
                batch.append(self.space.get(i))
        return batch

    def update(self, inputs, results):
        for inp, res in zip(inputs, results):
            self.fitness[inp.config.index] = self.flops_of(res)
