"""An LLM shadow between two OpenAI-compatible servers (docs/shadow.md, "Text measures"):
a candidate that answers 10 % of the prompts differently is reported on exactly those
pairs, by the text measures; a control-vs-control run (the same model on both servers)
reports no difference."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support.gateway import GatewayHarness
from tests.support.upstreams.openai import OPENAI_TOKEN, FakeOpenAI
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(240)

PROMPTS = 100
ROUTE = "acme/chat"
ADMIN_TOKEN = "adm_shadow_llm"  # a test value, not a credential
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture
async def servers(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[FakeOpenAI, FakeOpenAI]]:
    monkeypatch.setenv("CUTOVER_TEST_OPENAI_KEY", OPENAI_TOKEN)
    async with FakeOpenAI(token=OPENAI_TOKEN) as old, FakeOpenAI(token=OPENAI_TOKEN) as new:
        yield old, new


def _differs(prompt: str) -> bool:
    return int(prompt.rsplit(" ", 1)[1]) % 10 == 0


async def _report(make_gateway: Any, old: FakeOpenAI, new: FakeOpenAI) -> dict[str, Any]:
    def provider(server: FakeOpenAI) -> dict[str, Any]:
        return {"kind": "openai", "base_url": f"{server.url}/v1",
                "token_env": "CUTOVER_TEST_OPENAI_KEY", "max_concurrency": 50}

    h: GatewayHarness = await make_gateway(
        providers={"old": provider(old), "new": provider(new)},
        routes=[{"model": ROUTE, "provider": "old", "target": "chat-model",
                 "candidate": "new", "candidate_target": "chat-model-2",
                 "shadow_percent": 100, "baseline_percent": 0,
                 "shadow_policy": {"allow_fields": ["prompt"]},
                 "shadow_budget": {"max_concurrent": 50, "max_per_hour": 10_000}}],
        admin={"tokens": [{"name": "ops", "token": ADMIN_TOKEN}]},
    )
    for index in range(PROMPTS):
        response = await h.client.post(f"/v1/models/{ROUTE}/predictions",
                                       json={"input": {"prompt": f"say hello {index}"}},
                                       headers=h.headers)
        assert response.status == 201, await response.text()

    async def every_pair() -> dict[str, Any] | None:
        await h.settle(rounds=500)  # provider calls run as tasks: settle until all paired
        response = await h.client.get(f"/admin/routes/{ROUTE}/shadow-report", headers=ADMIN,
                                      params={"format": "json"})
        assert response.status == 200, await response.text()
        report: dict[str, Any] = await response.json()
        return report if report["pairs"] == PROMPTS else None

    return await wait_until(every_pair, 120.0, what=f"{PROMPTS} pairs in the report")


def _reported(report: dict[str, Any]) -> dict[str, int]:
    return {m["measure"]: m["reported"]["count"] for m in report["measures"]}


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_a_candidate_answering_10_percent_differently_is_reported(
    backend: str, make_gateway: Any, servers: tuple[FakeOpenAI, FakeOpenAI]
) -> None:
    old, new = servers
    new.rewrite = lambda prompt: f"{prompt} but differently" if _differs(prompt) else prompt
    report = await _report(make_gateway, old, new)
    assert report["differences"]["count"] == PROMPTS // 10
    reported = _reported(report)
    assert reported["text_exact"] == reported["text_edit"] == PROMPTS // 10
    assert "json_valid" not in reported and "json_keys" not in reported  # plain text
    assert {m["pair"]["pair_id"] is not None for m in report["worst"]} == {True}
    assert all(m["judgement"]["findings"] for m in report["worst"])
    assert all('"prompt": "say hello ' in m["pair"]["input_excerpt"] for m in report["worst"])
    assert report["verdict"]["decision"] != "promote"


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_control_against_control_reports_no_difference(
    backend: str, make_gateway: Any, servers: tuple[FakeOpenAI, FakeOpenAI]
) -> None:
    old, new = servers
    report = await _report(make_gateway, old, new)
    assert report["differences"]["count"] == 0
    assert set(_reported(report).values()) == {0}
    assert report["worst"] == []
