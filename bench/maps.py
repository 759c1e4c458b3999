"""What the maps cost per prediction (docs/translation.md; docs/benchmarks.md "Maps").

For each preset of examples/maps/ (and the ``openai`` adapter's default chat map), one
prediction's translation as the gateway runs it: the input map on the example's app
input (:func:`gateway.translator.input_of`) plus the output map on the example's
provider output (:func:`gateway.maps.run`), programs already compiled (they are, once a
route is loaded). Also the same with a seed beyond 2^53 in the input (the marked-integer
path). Prints p50, p99 and the mean CPU time (this thread's, so a busy machine's
scheduling waits do not count) in microseconds over ``--runs`` predictions, after a
warm-up, with the command and the machine; the target is p50 under 50 µs per preset.

    .venv/bin/python bench/maps.py [--runs 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.openai_mapping import DEFAULT_MAPS
from gateway import maps
from gateway.translator import input_of

PRESETS = Path(__file__).resolve().parents[1] / "examples" / "maps"
TARGET_US = 50.0


def cases() -> list[tuple[str, Callable[[], Any]]]:
    found: list[tuple[str, Callable[[], Any]]] = []
    for path in sorted(PRESETS.glob("*.toml")):
        data = tomllib.loads(path.read_text())
        example = {k: json.loads(v) for k, v in data["example"].items()}
        found.append((path.stem, _one(data.get("input"), data.get("output"), example)))
        big = {**example, "input": {**example["input"], "seed": 18446744073709551615}}
        found.append((path.stem + " +big seed", _one(data.get("input"), data.get("output"), big)))
    chat = {"input": {"prompt": "hello", "system_prompt": "be brief", "max_new_tokens": 64,
                      "temperature": 0.7}, "provider_output": ["Hel", "lo"]}
    found.append(("openai default chat (input only)", _one(DEFAULT_MAPS["chat"], None, chat)))
    return found


def _one(input_map: str | None, output_map: str | None,
         example: dict[str, Any]) -> Callable[[], Any]:
    app_input, provider_output = example["input"], example["provider_output"]
    for program in (input_map, output_map):
        if program is not None:
            maps.compiled(program)  # as when the route is loaded

    def translate() -> Any:
        request = input_of(input_map, app_input, "p") if input_map else app_input
        seen = maps.run(output_map, provider_output, what="o") if output_map else None
        return request, seen

    return translate


def measure(run: Callable[[], Any], runs: int) -> list[float]:
    for _ in range(min(1000, runs)):
        run()
    timings = []
    clock = time.thread_time_ns  # CPU time: a shared machine's waits are not the map's
    for _ in range(runs):
        start = clock()
        run()
        timings.append((clock() - start) / 1000.0)
    return sorted(timings)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20000)
    args = parser.parse_args()
    print(f"command: .venv/bin/python bench/maps.py --runs {args.runs}")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, "
          f"Python {platform.python_version()}, load {os.getloadavg()[0]:.2f}")
    print(f"{'preset':44} {'p50 µs':>8} {'p99 µs':>8} {'mean µs':>8}")
    worst = 0.0
    for name, run in cases():
        timings = measure(run, args.runs)
        p50, p99 = timings[len(timings) // 2], timings[int(len(timings) * 0.99)]
        worst = max(worst, p50)
        print(f"{name:44} {p50:8.1f} {p99:8.1f} {statistics.fmean(timings):8.1f}")
    verdict = "met" if worst < TARGET_US else "NOT met"
    print(f"target p50 < {TARGET_US:g} µs per preset: {verdict} (worst p50 {worst:.1f} µs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
