"""The promises checked for every prediction of a chaos run (docs/reliability.md).

For each prediction the app created:

1. it reached a terminal state within its deadline;
2. its state and output are the provider's (a prediction the provider never saw must
   be ``canceled``); file outputs are the gateway's URLs, and their bytes match the
   SHA-256 the provider recorded;
3. its receiver got exactly one ``completed`` message (one ``webhook-id`` whose body is
   terminal, with the prediction's final status), every attempt validly signed, and
   acknowledged at least once;
4. no other message arrived after the ``completed`` one.

Run-wide: the provider never ran more jobs at once than its ``max_concurrency``, and no
gateway log line holds a token, key, secret or signature.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpx

from chaos.driver import TERMINAL, Tracked
from chaos.provider import FakeJob, FakeProvider
from chaos.receiver import Delivery
from contracts.job import JobState

__all__ = ["Violation", "check_logs", "check_prediction"]

_LONG_RUN = re.compile(r"[A-Za-z0-9+/]{40,}={0,2}")
STATUS = {
    JobState.COMPLETED: "succeeded", JobState.FAILED: "failed", JobState.CANCELED: "canceled",
}


@dataclass(frozen=True)
class Violation:
    """One broken promise; ``prediction_id`` is None for a run-wide one."""

    prediction_id: str | None
    promise: str
    detail: str

    def line(self) -> str:
        return f"{self.prediction_id or '(run)'}  {self.promise}: {self.detail}"


async def check_prediction(
    item: Tracked, provider: FakeProvider, deliveries: list[Delivery], http: httpx.AsyncClient,
    grace_s: float = 0.0,
) -> list[Violation]:
    """Every broken promise of one prediction (empty when it kept them all).

    ``grace_s`` extends its deadline: the time gateways spent killed during the run.
    """
    pid = item.prediction_id or f"(plan {item.plan.index}, never created)"
    if item.prediction_id is None or item.final is None:
        return [Violation(pid, "terminal", item.error or "no terminal state seen")]
    found: list[Violation] = []
    took = item.time_to_terminal_s
    if took is None or took > item.deadline_s + grace_s:
        deadline = item.deadline_s + grace_s
        found.append(Violation(pid, "terminal", f"took {took} s; deadline {deadline:.1f} s"))
    found += await _matches_provider(pid, item.final, provider.job(pid), http)
    found += _webhooks(pid, item.final["status"], deliveries)
    return found


async def _matches_provider(
    pid: str, final: dict[str, Any], job: FakeJob | None, http: httpx.AsyncClient,
) -> list[Violation]:
    status = final["status"]
    if job is None:
        if status != "canceled" or final.get("output") is not None:
            return [Violation(pid, "provider's answer", f"never submitted, yet {status}")]
        return []
    if job.status not in STATUS:
        return [Violation(pid, "provider's answer", f"{status} while the provider still has "
                          f"it {job.status.value}")]
    if STATUS[job.status] != status:
        return [Violation(pid, "provider's answer",
                          f"{status}; the provider ended it {STATUS[job.status]}")]
    if job.status is not JobState.COMPLETED:
        return []
    return await _same_output(pid, final["output"], job, http)


async def _same_output(
    pid: str, output: Any, job: FakeJob, http: httpx.AsyncClient,
) -> list[Violation]:
    if not job.files:
        if output != job.output:
            return [Violation(pid, "provider's answer", "output differs from the provider's")]
        return []
    urls = output if isinstance(output, list) else [output]
    if len(urls) != len(job.files) or not all(isinstance(u, str) for u in urls):
        return [Violation(pid, "owned output", f"{len(job.files)} files expected, got {output!r}")]
    found = []
    for url, expected in zip(urls, job.files, strict=True):
        if url.startswith("data:"):
            found.append(Violation(pid, "owned output", "a data: URI, not an owned URL"))
            continue
        response = await http.get(url)
        digest = hashlib.sha256(response.content).hexdigest()
        if response.status_code != 200 or digest != expected:
            found.append(Violation(pid, "owned output",
                                   f"{url} answered {response.status_code}, sha256 {digest[:12]}"
                                   f"..., the provider's is {expected[:12]}..."))
    return found


def _webhooks(pid: str, status: str, deliveries: list[Delivery]) -> list[Violation]:
    found = []
    unsigned = [d for d in deliveries if not d.signed]
    if unsigned:
        found.append(Violation(pid, "signed webhook", f"{len(unsigned)} attempts did not verify"))
    completed = {d.webhook_id for d in deliveries if d.status in TERMINAL}
    if len(completed) != 1:
        found.append(Violation(pid, "one completed webhook", f"{len(completed)} completed ids"))
        return found
    (message,) = completed
    attempts = [d for d in deliveries if d.webhook_id == message]
    if any(d.status != status for d in attempts):
        found.append(Violation(pid, "one completed webhook", "its status is not the final one"))
    if not any(d.answered < 300 for d in attempts):
        found.append(Violation(pid, "one completed webhook", "never delivered"))
    first = min(d.at for d in attempts)
    late = [d for d in deliveries if d.webhook_id != message and d.at > first]
    if late:
        found.append(Violation(pid, "nothing after completed",
                               f"{len(late)} other messages after it ({late[0].status})"))
    return found


def check_logs(text: str, secrets: Iterable[str], signatures: set[str]) -> list[Violation]:
    """A violation for each secret, and for signatures, found in the gateway's logs.

    ``secrets`` are looked for verbatim (named by position, never shown); ``signatures``
    (every one sent to or by the gateway during the run) by scanning the log for
    base64 and hex runs long enough to be one.
    """
    found = []
    for index, value in enumerate(secrets):
        hits = text.count(value) if value else 0
        if hits:
            found.append(Violation(None, "no secrets in logs", f"secret #{index}: {hits} lines"))
    leaked = {m for m in _LONG_RUN.findall(text) if m in signatures}
    if leaked:
        found.append(Violation(None, "no secrets in logs", f"{len(leaked)} signatures logged"))
    for marker in ("webhook-signature", "x-fake-signature", "whsec_", "Bearer "):
        if marker.lower() in text.lower():
            found.append(Violation(None, "no secrets in logs", f"log holds {marker!r}"))
    return found
