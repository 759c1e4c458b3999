"""One driver per provider kind: the same verbs over each provider's fake server.

A driver configures the gateway for its kind (``provider`` settings, a route ``target``),
moves the upstream job (start, finish, fail, expire), injects wire faults, and hands the
webhooks the provider sent to the in-process gateway. What a kind cannot do is a
property of the driver (``webhooks``, ``recovers_lost``...), read by the shared tests.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest

from adapters.fake import FakeAdapter
from contracts.job import JobState
from gateway.app import LOOPS
from gateway.http import keys
from tests.support.gateway import GatewayHarness
from tests.support.upstreams.base import Delivery, FakeUpstream, UpJob
from tests.support.upstreams.cog import COG_FAKE_TOKEN, FakeCog
from tests.support.upstreams.fal import FAL_TOKEN, FakeFal
from tests.support.upstreams.openai import OPENAI_TOKEN, FakeOpenAI
from tests.support.upstreams.replicate import REPLICATE_TOKEN, FakeReplicate
from tests.support.upstreams.runpod import RUNPOD_TOKEN, FakeRunPod

__all__ = ["KINDS", "Driver", "make_driver", "pump"]

KINDS = ["fake", "cog", "fal", "runpod", "openai", "replicate"]
POLL = {"fetch_interval_s": 0.02, "fetch_max_interval_s": 0.05}


@dataclass
class Sent:
    """A webhook as the gateway receives it: path, headers, raw body."""

    path: str
    headers: dict[str, str]
    body: bytes


# Deadline for the upstream job to appear: generous, as it is a deadline for a condition
# (met within a few passes on an idle machine), not a pause.
JOB_WAIT_S = 30.0


async def pump(h: GatewayHarness, rounds: int = 20) -> None:
    """Step every loop until a pass does nothing (or ``rounds`` passes: polls keep coming
    due at the short intervals this suite uses)."""
    for _ in range(rounds):
        if sum([await loop.run_once() for loop in h.app[LOOPS]]) == 0:
            return


class Driver:
    """The shared verbs; subclasses bind them to one fake server."""

    kind = ""
    webhooks = True  # the provider calls back
    signed = True  # its webhooks carry a signature with a timestamp
    recovers_lost = True  # a lost webhook's outcome can still be asked for
    wire = True  # a real HTTP server sits behind the adapter
    token_env: str | None = None
    token: str | None = None
    target: str | None = None
    server: FakeUpstream

    def __init__(self) -> None:
        self.h: GatewayHarness | None = None

    async def start(self) -> None:
        await self.server.__aenter__()

    async def stop(self) -> None:
        await self.server.__aexit__(None, None, None)

    def provider(self) -> dict[str, Any]:
        raise NotImplementedError

    def expected(self, prompt: str) -> Any:
        """The output the app sees for the echo answer to ``prompt``."""
        return prompt.upper()

    async def job(self) -> UpJob:
        """The upstream job of the one prediction (waits until it exists)."""

        async def one() -> UpJob:
            while not self.server.jobs:
                await self._step()
            return self.server.only()

        return await asyncio.wait_for(one(), JOB_WAIT_S)

    async def _step(self) -> None:
        # One pass of every loop, then look again: a full pump() keeps stepping while
        # polls come due, which on a loaded machine outlasts the whole wait.
        if self.h is not None:
            await pump(self.h, rounds=1)
        await asyncio.sleep(0.01)

    def start_job(self, job: UpJob) -> None:
        self.server.start(job)

    def finish(self, job: UpJob) -> None:
        self.server.finish(job)

    def fail(self, job: UpJob, error: str) -> None:
        self.server.fail(job, error)

    def expire(self, job: UpJob) -> None:
        self.server.expire(job)

    def fault(self, op: str, status: int, body: bytes | str | None = b"", times: int = 1,
              **headers: str) -> None:
        self.server.fault(op, status, body, times, **headers)

    def status_op(self) -> str:
        return "status"

    def sent(self) -> list[Sent]:
        return [_sent(d) for d in self.server.deliveries]

    def forge(self, sent: Sent) -> Sent:
        """The same delivery with a signature that does not match."""
        return Sent(sent.path, sent.headers, sent.body.replace(b'"', b"'", 1) + b" ")

    def stale(self, sent: Sent) -> Sent:
        raise NotImplementedError

    def cancels(self) -> int:
        return sum(1 for op, _ in self.server.requests if op == "cancel")

    def submits(self) -> int:
        return len(self.server.jobs) + len(getattr(self.server, "forgotten", {}))


def _sent(delivery: Delivery) -> Sent:
    parts = urlsplit(delivery.url)
    return Sent(parts.path, dict(delivery.headers), delivery.body)


class FakeKind(Driver):
    """The in-memory :class:`FakeAdapter`: no wire, so wire faults do not apply."""

    kind, wire = "fake", False

    def __init__(self) -> None:
        super().__init__()
        self._sent: list[Sent] = []
        self.server = None  # type: ignore[assignment]

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def provider(self) -> dict[str, Any]:
        return {"kind": "fake", **POLL}

    @property
    def fake(self) -> FakeAdapter:
        assert self.h is not None
        adapter = self.h.app[keys.PROVIDERS]["up"].adapter
        assert isinstance(adapter, FakeAdapter)
        return adapter

    async def job(self) -> UpJob:
        async def one() -> UpJob:
            while not self.fake.submitted:
                await self._step()
            request = self.fake.submitted[0]
            return UpJob(id=request.job_id, input=request.input, webhook=request.webhook_url)

        return await asyncio.wait_for(one(), JOB_WAIT_S)

    def _record(self, job: UpJob, state: JobState, **fields: Any) -> None:
        self.fake.set_state(job.id, state, **fields)
        body = self.fake.webhook_body(job.id, state, **fields)
        assert job.webhook is not None
        self._sent.append(Sent(urlsplit(job.webhook).path, self.fake.sign(body), body))

    def start_job(self, job: UpJob) -> None:
        self._record(job, JobState.RUNNING, logs="started")

    def finish(self, job: UpJob) -> None:
        self._record(job, JobState.COMPLETED, output=self.expected(job.input["prompt"]))

    def fail(self, job: UpJob, error: str) -> None:
        self._record(job, JobState.FAILED, error=error)

    def expire(self, job: UpJob) -> None:
        self.fake.forget(job.id)

    def sent(self) -> list[Sent]:
        return list(self._sent)

    def forge(self, sent: Sent) -> Sent:
        return Sent(sent.path, {"x-fake-signature": "0" * 64}, sent.body)

    def stale(self, sent: Sent) -> Sent:
        pytest.skip("the fake's HMAC scheme has no timestamp")

    def fault(self, *args: Any, **kwargs: Any) -> None:
        pytest.skip("the in-memory fake has no wire to break")

    def cancels(self) -> int:
        return len(self.fake.cancel_calls)

    def submits(self) -> int:
        return len({r.job_id for r in self.fake.submitted})


class CogKind(Driver):
    kind, signed, recovers_lost = "cog", False, False

    def __init__(self) -> None:
        super().__init__()
        self.server = FakeCog()

    def provider(self) -> dict[str, Any]:
        # Probes far apart, as Cog's watchdog is: it is no poll, and a probe of a finished
        # prediction reports it lost at once here (lost_grace_s = 0).
        return {"kind": "cog", "base_url": self.server.url, "fetch_interval_s": 0.3,
                "fetch_max_interval_s": 0.5, "lost_grace_s": 0,
                "webhook_auth_token": COG_FAKE_TOKEN}

    def status_op(self) -> str:
        return "submit"  # the watchdog probe is a PUT, like the submit

    def forge(self, sent: Sent) -> Sent:
        return Sent(sent.path, {**sent.headers, "Authorization": "Bearer not-it"}, sent.body)

    def stale(self, sent: Sent) -> Sent:
        pytest.skip("Cog signs nothing and sends no timestamp")

    def expected(self, prompt: str) -> Any:
        return prompt.upper()


class FalKind(Driver):
    kind, token_env, token, target = "fal", "CUTOVER_TEST_FAL_KEY", FAL_TOKEN, "fal-ai/echo/fast"

    def __init__(self) -> None:
        super().__init__()
        self.server = FakeFal(token=FAL_TOKEN)

    def provider(self) -> dict[str, Any]:
        return {"kind": "fal", "base_url": self.server.url, "token_env": self.token_env,
                "jwks_url": f"{self.server.url}/.well-known/jwks.json",
                "file_hosts": ["127.0.0.1"], **POLL}

    def forge(self, sent: Sent) -> Sent:
        return Sent(sent.path, sent.headers, sent.body + b" ")

    def stale(self, sent: Sent) -> Sent:
        server = self.server
        assert isinstance(server, FakeFal)
        job_id = json.loads(sent.body)["request_id"]
        headers = server.signed(server.jobs[job_id], sent.body, timestamp=int(time.time()) - 301)
        return Sent(sent.path, headers, sent.body)


class RunPodKind(Driver):
    kind, signed = "runpod", False
    token_env, token, target = "CUTOVER_TEST_RUNPOD_KEY", RUNPOD_TOKEN, "ep-echo"

    def __init__(self) -> None:
        super().__init__()
        self.server = FakeRunPod(token=RUNPOD_TOKEN)

    def provider(self) -> dict[str, Any]:
        return {"kind": "runpod", "base_url": f"{self.server.url}/v2",
                "token_env": self.token_env, **POLL}

    def forge(self, sent: Sent) -> Sent:
        path = sent.path.rsplit("/", 1)[0] + "/" + "x" * 43  # the URL token is the secret
        return Sent(path, sent.headers, sent.body)

    def stale(self, sent: Sent) -> Sent:
        pytest.skip("RunPod webhooks are unsigned pokes (no timestamp to be stale)")


class OpenAIKind(Driver):
    kind, webhooks, signed, target = "openai", False, False, "echo-1"
    token_env, token = "CUTOVER_TEST_OPENAI_KEY", OPENAI_TOKEN

    def __init__(self) -> None:
        super().__init__()
        self.server = FakeOpenAI(token=OPENAI_TOKEN)
        self.server.gate = asyncio.Event()

    async def stop(self) -> None:
        assert self.server.gate is not None  # type: ignore[attr-defined]
        self.server.gate.set()  # type: ignore[attr-defined]  # let held calls end
        await super().stop()

    def provider(self) -> dict[str, Any]:
        return {"kind": "openai", "base_url": f"{self.server.url}/v1", "token_env": self.token_env,
                "max_concurrency": 4, **POLL}

    def expected(self, prompt: str) -> Any:
        words = prompt.upper().split(" ")
        return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]

    def start_job(self, job: UpJob) -> None:
        pass  # a held call is running from the start

    def finish(self, job: UpJob) -> None:
        assert self.server.gate is not None  # type: ignore[attr-defined]
        self.server.gate.set()  # type: ignore[attr-defined]

    def fail(self, job: UpJob, error: str) -> None:
        job.state, job.error = "failed", error
        self.finish(job)

    def expire(self, job: UpJob) -> None:
        pytest.skip("a held call has no result retention to expire")

    def status_op(self) -> str:
        return "submit"  # the call itself carries the answer

    def sent(self) -> list[Sent]:
        return []

    def stale(self, sent: Sent) -> Sent:
        pytest.skip("no webhooks")

    def cancels(self) -> int:
        return self.server.closed_early  # type: ignore[attr-defined, no-any-return]


class ReplicateKind(Driver):
    kind, target = "replicate", "acme/echo"
    token_env, token = "CUTOVER_TEST_REPLICATE_TOKEN", REPLICATE_TOKEN

    def __init__(self) -> None:
        super().__init__()
        self.server = FakeReplicate(token=REPLICATE_TOKEN)

    def provider(self) -> dict[str, Any]:
        return {"kind": "replicate", "base_url": self.server.url, "token_env": self.token_env,
                "file_hosts": ["127.0.0.1"], **POLL}

    def stale(self, sent: Sent) -> Sent:
        from datetime import UTC, datetime, timedelta

        server = self.server
        assert isinstance(server, FakeReplicate)
        headers, body = server.sign(sent.body, datetime.now(UTC) - timedelta(seconds=400))
        return Sent(sent.path, headers, body)


_DRIVERS: dict[str, type[Driver]] = {
    "fake": FakeKind, "cog": CogKind, "fal": FalKind, "runpod": RunPodKind,
    "openai": OpenAIKind, "replicate": ReplicateKind,
}


def make_driver(kind: str) -> Driver:
    return _DRIVERS[kind]()
