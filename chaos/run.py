"""One chaos run, end to end: ``cutover chaos`` (docs/reliability.md).

Starts the fake provider and the app's webhook receiver on 127.0.0.1, one or more
gateway processes configured against them, drives the predictions, optionally SIGKILLs
and restarts gateways at random moments, then checks every promise (:mod:`chaos.check`)
and returns a :class:`chaos.report.Report`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import random
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

from chaos import check
from chaos.driver import VERSION, Driver, Tracked
from chaos.fleet import Fleet
from chaos.profile import FaultProfile
from chaos.provider import FakeProvider
from chaos.receiver import Receiver
from chaos.report import Report

__all__ = ["Options", "Secrets", "build_report", "gateway_config", "run", "serve", "settle"]

MODEL = "chaos/echo"


@dataclass(frozen=True)
class Options:
    """How to run; ``database_url`` None means a SQLite file in ``workdir``."""

    workdir: Path
    predictions: int = 1000
    profile: FaultProfile = field(default_factory=FaultProfile)
    database_url: str | None = None
    gateways: int = 1
    kills: int = 0
    """SIGKILL a random gateway process this many times, at random moments."""
    kill_gap_s: tuple[float, float] = (1.0, 4.0)
    victim: int | None = None
    """Kill only this gateway process (by index); None picks one at random each time."""
    seed: int | None = None
    break_invariant: bool = False


@dataclass(frozen=True)
class Secrets:
    """The run's credentials, random each run (the log check looks for each)."""

    api_token: str = field(default_factory=lambda: "r8_chaos_" + secrets.token_hex(16))
    admin_token: str = field(default_factory=lambda: "adm_chaos_" + secrets.token_hex(16))
    provider_secret: str = field(default_factory=lambda: secrets.token_hex(24))
    signing_secret: str = field(
        default_factory=lambda: "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    )

    def all(self) -> list[str]:
        return [self.api_token, self.admin_token, self.provider_secret,
                self.signing_secret, self.signing_secret.removeprefix("whsec_")]


def gateway_config(
    options: Options, keys: Secrets, provider_url: str, database_url: str
) -> dict[str, Any]:
    """The configuration every gateway process of the run shares."""
    profile = options.profile
    return {
        "gateway": {
            "listen": "127.0.0.1:0", "public_url": "http://127.0.0.1:0",
            "database_url": database_url,
            "storage_url": f"file://{options.workdir / 'assets'}",
            "api_tokens": [keys.api_token],
            "loop_interval_s": 0.1, "lease_s": 5.0,
            "dispatch_backoff_base_s": 0.05, "dispatch_backoff_max_s": 1.0,
            "cancel_grace_s": profile.cancel_grace_s, "cancel_resend_s": 1.0,
            "max_job_lifetime_s": max(600.0, profile.terminal_within_s * 2),
        },
        "webhooks": {
            "allow_hosts": ["127.0.0.1"], "signing_secret": keys.signing_secret,
            "retry_delays_s": [0.2, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0],
            "throttle_s": 0.2, "max_concurrency": 32, "max_per_host": 32,
        },
        "admin": {"tokens": [keys.admin_token]},
        "providers": {"fake": {
            "kind": "fake", "base_url": provider_url, "webhook_auth_token": keys.provider_secret,
            "max_concurrency": profile.max_concurrency, "request_timeout_s": 10.0,
            "fetch_interval_s": 1.0, "fetch_max_interval_s": 3.0,
        }},
        "routes": [{"model": MODEL, "version": VERSION, "provider": "fake"}],
    }


@contextlib.asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1 (port 0); yields its base URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def run(options: Options) -> Report:
    """Run the chaos described by ``options``; see the module docstring."""
    options.workdir.mkdir(parents=True, exist_ok=True)
    if options.kills:  # the client cannot retry a create safely (no Idempotency-Key)
        options = replace(options, profile=options.profile.model_copy(update={"client_ratio": 0}))
    rng = random.Random(options.seed)  # noqa: S311 (fault plans, not security)
    keys = Secrets()
    provider = FakeProvider(options.profile, secret=keys.provider_secret, rng=rng,
                            corrupt_one_file=options.break_invariant)
    receiver = Receiver(keys.signing_secret)
    database_url = options.database_url or f"sqlite+aiosqlite:///{options.workdir / 'chaos.db'}"
    started = time.monotonic()
    async with serve(provider.app()) as provider_url, serve(receiver.app()) as hooks:
        config = gateway_config(options, keys, provider_url, database_url)
        fleet = Fleet(config, options.workdir, options.gateways)
        await fleet.start()
        slack_s = 60.0 * options.kills  # a busy machine restarts a gateway slowly
        driver = Driver(urls=fleet.urls, token=keys.api_token, hooks_url=f"{hooks}/hooks",
                        profile=options.profile, rng=rng, wait_slack_s=10.0 + slack_s,
                        retry_creates_s=120.0 + slack_s)
        try:
            tracked = await _drive(driver, fleet, options, rng)
            await settle(tracked, receiver, options.profile)
            report = await build_report(options, tracked, provider, receiver, fleet, started)
        finally:
            await driver.aclose()
            await fleet.stop()
        report.violations += check.check_logs(
            fleet.log_text(), keys.all(), provider.signatures | receiver.signatures
        )
    return report


async def _drive(
    driver: Driver, fleet: Fleet, options: Options, rng: random.Random
) -> list[Tracked]:
    work = asyncio.create_task(driver.run(options.predictions, secrets.token_hex(4)))
    kills = 0
    while kills < options.kills and not work.done():
        await asyncio.wait({work}, timeout=rng.uniform(*options.kill_gap_s))
        if work.done():
            break
        victim = (
            rng.choice(fleet.processes) if options.victim is None
            else fleet.processes[options.victim]
        )
        await victim.kill()
        kills += 1
        await asyncio.sleep(rng.uniform(0.1, 1.0))
        await victim.start()
    return await work


async def settle(tracked: list[Tracked], receiver: Receiver, profile: FaultProfile) -> None:
    """Wait for each ended prediction's ``completed`` webhook to be acknowledged (bounded),
    then for a quiet spell in which a message sent after it would show."""
    ended = [t.prediction_id for t in tracked if t.final is not None and t.prediction_id]
    end = time.monotonic() + profile.receiver_failing_s + 30.0

    def pending() -> int:
        return sum(
            not any(d.status == t_status and d.answered < 300
                    for d in receiver.deliveries.get(pid, []))
            for pid, t_status in ((t.prediction_id, t.final["status"]) for t in tracked
                                  if t.final is not None and t.prediction_id in ended)
        )

    while pending() and time.monotonic() < end:
        receiver.arrived.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(receiver.arrived.wait(), 0.5)
    await asyncio.sleep(max(1.0, min(profile.webhook_late_max_s, 5.0)))


async def build_report(
    options: Options, tracked: list[Tracked], provider: FakeProvider, receiver: Receiver,
    fleet: Fleet, started: float,
) -> Report:
    """Check every prediction and the run-wide promises; the report (logs not yet read)."""
    violations: list[check.Violation] = []
    async with httpx.AsyncClient(timeout=30.0) as http:
        for item in tracked:
            deliveries = receiver.deliveries.get(item.prediction_id or "", [])
            violations += await check.check_prediction(
                item, provider, deliveries, http, grace_s=fleet.down_s
            )
    limit = options.profile.max_concurrency
    if provider.peak_active > limit:
        violations.append(check.Violation(
            None, "max_concurrency", f"the provider ran {provider.peak_active} jobs at once "
            f"(limit {limit})"))
    faults = Counter(provider.faults)
    faults["receiver_503"] = receiver.refused
    faults["gateway_sigkill"] = sum(p.kills for p in fleet.processes)
    return Report(
        predictions=len(tracked),
        seconds=time.monotonic() - started,
        statuses=Counter(t.final["status"] if t.final else "unfinished" for t in tracked),
        plans=_plans(tracked),
        faults=+faults,
        times_s=[s for t in tracked if (s := t.time_to_terminal_s) is not None],
        peak_concurrency=provider.peak_active,
        max_concurrency=limit,
        gateways=options.gateways,
        violations=violations,
        workdir=str(options.workdir),
    )


def _plans(tracked: list[Tracked]) -> Counter[str]:
    plans: Counter[str] = Counter()
    for t in tracked:
        plans["replicate_client"] += t.plan.via_client
        plans["app_cancel"] += t.plan.cancel_at_s is not None
        plans["cancel_after"] += t.plan.cancel_after_s is not None
        plans["failing_receiver"] += t.plan.fail_s > 0
    return +plans
