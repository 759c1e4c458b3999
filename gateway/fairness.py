"""Fair dispatch order when a provider is at capacity (docs/limits.md, "Fair queueing").

Waiting jobs are served by route priority first (higher first), then round-robin across
the API tokens that created them: each token's oldest waiting job competes, and the token
served least recently goes first, so one app flooding the queue cannot starve the others.
Within a token, higher priority first, then creation order. Pure: the dispatcher keeps the
"last served" times (per process) and the store supplies candidates.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

__all__ = ["Candidate", "fair_order"]


@dataclass(frozen=True)
class Candidate:
    """A waiting job: its id, the token that created it, its route priority, its age."""

    id: str
    owner: str
    priority: int
    created_at: datetime


def fair_order(
    candidates: Sequence[Candidate], last_served: Mapping[str, float], limit: int
) -> list[Candidate]:
    """Up to ``limit`` candidates in the order they should be dispatched.

    ``last_served`` maps a token to when it was last dispatched for (any monotonic number;
    tokens never served count as longest ago).
    """
    queues: dict[str, list[Candidate]] = defaultdict(list)
    for candidate in sorted(candidates, key=lambda c: (-c.priority, c.created_at, c.id)):
        queues[candidate.owner].append(candidate)
    served = dict(last_served)
    chosen: list[Candidate] = []
    tick = max(served.values(), default=0.0)
    while queues and len(chosen) < limit:
        owner = min(
            queues,
            key=lambda o: (-queues[o][0].priority, served.get(o, float("-inf")),
                           queues[o][0].created_at),
        )
        chosen.append(queues[owner].pop(0))
        tick += 1.0
        served[owner] = tick
        if not queues[owner]:
            del queues[owner]
    return chosen
