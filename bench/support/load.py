"""Load generators and their results: wrk for throughput, hey for a fixed request rate.

Both are Debian packages (``wrk``, ``hey``) run as subprocesses against 127.0.0.1. Latency
figures are in milliseconds.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

__all__ = ["Result", "hey", "median", "print_header", "process_cpu_s", "with_cpu", "wrk"]


@dataclass(frozen=True)
class Result:
    """Requests per second and latency percentiles (ms) of one load run; ``cpu_us``: the
    server process's CPU time per request (microseconds), when measured (:func:`with_cpu`)."""

    rate: float
    p50_ms: float
    p99_ms: float
    errors: int = 0
    cpu_us: float | None = None

    def line(self) -> str:
        errors = f"  ERRORS {self.errors}" if self.errors else ""
        cpu = f"  cpu/req {self.cpu_us:6.1f} us" if self.cpu_us is not None else ""
        return (
            f"{self.rate:8.0f} req/s  p50 {self.p50_ms:7.2f} ms  p99 {self.p99_ms:7.2f} ms"
            f"{cpu}{errors}"
        )


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def with_cpu(pid: int, seconds: float, run: Callable[[], Result]) -> Result:
    """``run()``'s result with the CPU time process ``pid`` spent per request meanwhile: on
    a shared machine the figure to compare between runs (throughput is the scheduler's)."""
    before = process_cpu_s(pid)
    result = run()
    requests = result.rate * seconds
    used = process_cpu_s(pid) - before
    return replace(result, cpu_us=used / requests * 1e6 if requests else None)


_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def _ms(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(number) * _UNITS_MS[unit]


def wrk(
    url: str,
    *,
    seconds: float,
    connections: int,
    headers: dict[str, str],
    script: Path | None = None,
) -> Result:
    """Closed-loop load: ``wrk -t2 -c<connections> -d<seconds>s --latency``."""
    command = ["wrk", "-t2", f"-c{connections}", f"-d{seconds:g}s", "--latency"]
    for name, value in headers.items():
        command += ["-H", f"{name}: {value}"]
    if script is not None:
        command += ["-s", str(script)]
    out = subprocess.run([*command, url], capture_output=True, text=True, check=True).stdout
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    pcts = dict(re.findall(r"^\s+(50|99)%\s+(\S+)", out, re.MULTILINE))
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: (.*)", out)
    errors = int(bad.group(1)) if bad else 0
    if socket_errors:
        errors += sum(int(n) for n in re.findall(r"\d+", socket_errors.group(1)))
    return Result(
        rate=float(rate.group(1)) if rate else 0.0,
        p50_ms=_ms(pcts["50"]) if "50" in pcts else float("nan"),
        p99_ms=_ms(pcts["99"]) if "99" in pcts else float("nan"),
        errors=errors,
    )


def hey(url: str, *, rate: int, seconds: float, headers: dict[str, str]) -> Result:
    """Open-ish load at ``rate`` requests/s (4 workers at rate/4 each), via ``hey``."""
    workers = 4
    command = ["hey", "-z", f"{seconds}s", "-c", str(workers), "-q", f"{rate / workers:g}"]
    for name, value in headers.items():
        command += ["-H", f"{name}: {value}"]
    command += ["-o", "csv", url]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    lines = [line.split(",") for line in out.splitlines()[1:] if line]
    latencies = sorted(float(row[0]) * 1000 for row in lines)
    errors = sum(1 for row in lines if not row[6].startswith("2"))
    if not latencies:
        return Result(0.0, float("nan"), float("nan"), errors)
    return Result(
        rate=len(latencies) / seconds,
        p50_ms=latencies[len(latencies) // 2],
        p99_ms=latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        errors=errors,
    )


def median(values: list[float]) -> float:
    """The median, NaN for no values."""
    return statistics.median(values) if values else float("nan")


def print_header() -> None:
    """Print the command line and the machine with its load average (every script's top)."""
    import os
    import platform
    import sys

    print("command:", " ".join(["python", *sys.argv]))
    load_avg = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"machine: {platform.machine()}, Python {platform.python_version()}, "
          f"{len(os.sched_getaffinity(0))} cores, load average before {load_avg}", flush=True)
