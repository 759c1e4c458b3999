"""What the maps cost per prediction (docs/translation.md; docs/benchmarks.md "Maps").

For each preset of examples/maps/ (and the ``openai`` adapter's default chat map), one
prediction's translation as the gateway runs it: the input map on the example's app
input (:func:`gateway.translation.translator.input_of`) plus the output map on the example's
provider output (:func:`gateway.translation.maps.run`), programs already compiled (they are, once a
route is loaded). Also the same with a seed beyond 2^53 in the input (the marked-integer
path). Prints, per preset, the p50 of each map alone and of both (a prediction), and
the p99 of both: p50, p99 and the mean CPU time (this thread's, so a busy machine's
scheduling waits do not count) in microseconds over ``--runs`` predictions, after a
warm-up, with the command and the machine; the target is p50 under 50 µs per preset.

    .venv/bin/python bench/maps.py [--runs 20000] [--stream 3000 --chunk-ms 10]

``--stream N`` also plays a streamed text output of N chunks, one every ``--chunk-ms``
ms (Cog's ``output`` webhooks carry the whole list so far), through an output map
(``join("")``): the map CPU time when every interim update runs it on the list so far
(before) and under the finalizer's :class:`gateway.finalizer.InterimBudget` (after), and
how many updates ran it; the final output is mapped once in both.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.openai_mapping import DEFAULT_MAPS
from gateway.finalizer import InterimBudget
from gateway.translation import maps
from gateway.translation.translator import input_of

PRESETS = Path(__file__).resolve().parents[1] / "examples" / "maps"
TARGET_US = 50.0


Case = tuple[str, Callable[[], Any] | None, Callable[[], Any] | None]


def cases() -> list[Case]:
    """(name, the input map's run, the output map's run) per preset and variant."""
    found: list[Case] = []
    for path in sorted(PRESETS.glob("*.toml")):
        data = tomllib.loads(path.read_text())
        example = {k: json.loads(v) for k, v in data["example"].items()}
        big = {**example, "input": {**example["input"], "seed": 18446744073709551615}}
        for suffix, used in (("", example), (" +big seed", big)):
            found.append((path.stem + suffix, *_sides(data.get("input"), data.get("output"),
                                                      used)))
    chat = {"input": {"prompt": "hello", "system_prompt": "be brief", "max_new_tokens": 64,
                      "temperature": 0.7}, "provider_output": None}
    found.append(("openai default chat map", *_sides(DEFAULT_MAPS["chat"], None, chat)))
    return found


def _sides(input_map: str | None, output_map: str | None, example: dict[str, Any]
           ) -> tuple[Callable[[], Any] | None, Callable[[], Any] | None]:
    app_input, provider_output = example["input"], example["provider_output"]
    for program in (input_map, output_map):
        if program is not None:
            maps.compiled(program)  # as when the route is loaded
    run_input = (lambda: input_of(input_map, app_input, "p")) if input_map else None
    run_output = (lambda: maps.run(output_map, provider_output, what="o")) if output_map \
        else None
    return run_input, run_output


def measure(run: Callable[[], Any] | None, runs: int) -> list[float]:
    """Sorted CPU times of ``runs`` calls, in microseconds ([0.0] for no map)."""
    if run is None:
        return [0.0]
    for _ in range(min(1000, runs)):
        run()
    timings = []
    clock = time.thread_time_ns  # CPU time: a shared machine's waits are not the map's
    for _ in range(runs):
        start = clock()
        run()
        timings.append((clock() - start) / 1000.0)
    return sorted(timings)


class _PlayedClock:
    """The stream's time: a chunk every ``chunk_s``, or later when an update took longer."""

    def __init__(self) -> None:
        self.at = 0.0

    def monotonic(self) -> float:
        return self.at


def stream(chunks: int, chunk_ms: float, budgeted: bool) -> tuple[float, int]:
    """(map CPU seconds, updates that ran the map) of one streamed output."""
    program, clock = 'join("")', _PlayedClock()
    maps.compiled(program)
    budget = InterimBudget(clock=clock)  # type: ignore[arg-type]
    sent = [f"token{n} " for n in range(chunks)]
    spent, ran = 0.0, 0
    for count in range(1, chunks + 1):
        took = 0.0
        if not budgeted or budget.allows("job"):
            start = time.thread_time()
            maps.run(program, sent[:count], what="o")
            took = time.thread_time() - start
            budget.spent("job", took)
            spent, ran = spent + took, ran + 1
        clock.at += max(chunk_ms / 1000.0, took)
    start = time.thread_time()
    maps.run(program, sent, what="o")  # the terminal output: always mapped
    return spent + time.thread_time() - start, ran


def _p(timings: list[float], share: float) -> float:
    return timings[min(len(timings) - 1, int(len(timings) * share))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20000)
    parser.add_argument("--stream", type=int, default=0, help="chunks of a streamed output")
    parser.add_argument("--chunk-ms", type=float, default=10.0)
    args = parser.parse_args()
    played = f" --stream {args.stream} --chunk-ms {args.chunk_ms:g}" if args.stream else ""
    print(f"command: .venv/bin/python bench/maps.py --runs {args.runs}{played}")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
          f"Python {platform.python_version()}, load {os.getloadavg()[0]:.2f}")
    print(f"{'preset':32} {'input p50':>9} {'output p50':>10} {'both p50':>9} {'both p99':>9}"
          "  (us of CPU)")
    worst_map = worst_both = 0.0
    for name, run_input, run_output in cases():
        ins, outs = measure(run_input, args.runs), measure(run_output, args.runs)
        sides = [run for run in (run_input, run_output) if run is not None]
        both = measure(lambda sides=sides: [run() for run in sides], args.runs)
        worst_map = max(worst_map, _p(ins, 0.5), _p(outs, 0.5))
        worst_both = max(worst_both, _p(both, 0.5))
        print(f"{name:32} {_p(ins, 0.5):9.1f} {_p(outs, 0.5):10.1f} {_p(both, 0.5):9.1f} "
              f"{_p(both, 0.99):9.1f}")
    for what, worst in (("one map", worst_map), ("a prediction's maps", worst_both)):
        verdict = "met" if worst < TARGET_US else "NOT met"
        print(f"target p50 < {TARGET_US:g} us, {what}: {verdict} (worst p50 {worst:.1f} us)")
    if args.stream:
        seconds = args.stream * args.chunk_ms / 1000.0
        print(f"a streamed output of {args.stream} chunks, one every {args.chunk_ms:g} ms "
              f"({seconds:g} s at that pace), map join(\"\"):")
        for label, budgeted in (("every interim update (before)", False),
                                ("InterimBudget (after)", True)):
            spent, ran = stream(args.stream, args.chunk_ms, budgeted)
            print(f"  {label:30} map CPU {spent:8.3f} s, {ran} of {args.stream} updates mapped")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
