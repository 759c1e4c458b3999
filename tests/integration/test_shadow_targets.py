"""A shadow is sent the target a live prediction on its provider gets (docs/shadow.md):
an OpenAI-compatible candidate is asked for the candidate's model name, not the
route's, a fal candidate's shadow reaches the candidate's app with the primary's input
(a file over the policy limit as text goes by reference), and after a promote each
arm's shadow names its own provider's model."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.rollout.router import Routed, target_of
from gateway.rollout.shadowgate import shadow_job
from gateway.rollout.spec import RouteSettings
from gateway.store.records import NewJob
from tests.support.gateway import GatewayHarness
from tests.support.upstreams.fal import FAL_TOKEN, FakeFal
from tests.support.upstreams.openai import OPENAI_TOKEN, FakeOpenAI

pytestmark = pytest.mark.timeout(60)

POLICY = {"allow_fields": ["prompt"]}


@pytest.fixture
async def openai(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeOpenAI]:
    monkeypatch.setenv("CUTOVER_TEST_OPENAI_KEY", OPENAI_TOKEN)
    async with FakeOpenAI(token=OPENAI_TOKEN) as server:
        yield server


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_an_openai_candidates_shadow_asks_for_the_candidates_model(
    backend: str, make_gateway: Any, openai: FakeOpenAI
) -> None:
    h: GatewayHarness = await make_gateway(
        providers={"llm": {"kind": "openai", "base_url": f"{openai.url}/v1",
                           "token_env": "CUTOVER_TEST_OPENAI_KEY"},
                   "fake": {"kind": "fake"}},
        routes=[{"model": "acme/chat", "provider": "fake", "target": "route-model",
                 "candidate": "llm", "candidate_target": "cand-model",
                 "shadow_percent": 100, "baseline_percent": 0, "shadow_policy": POLICY}],
    )
    response = await h.client.post("/v1/models/acme/chat/predictions",
                                   json={"input": {"prompt": "hi"}}, headers=h.headers)
    assert response.status == 201, await response.text()
    await h.settle()
    assert [job.scope for job in openai.jobs.values()] == ["cand-model"]


@pytest.fixture
async def fal(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeFal]:
    monkeypatch.setenv("CUTOVER_TEST_FAL_KEY", FAL_TOKEN)
    async with FakeFal(token=FAL_TOKEN) as server:
        yield server


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_a_fal_candidates_shadow_reaches_the_candidates_app_with_its_input(
    backend: str, make_gateway: Any, fal: FakeFal
) -> None:
    image = "data:image/png;base64," + "A" * 200_000  # over the policy's 64 KB as text
    h: GatewayHarness = await make_gateway(
        providers={"fal": {"kind": "fal", "base_url": fal.url,
                           "token_env": "CUTOVER_TEST_FAL_KEY",
                           "jwks_url": f"{fal.url}/.well-known/jwks.json"},
                   "fake": {"kind": "fake"}},
        routes=[{"model": "acme/img", "provider": "fake", "candidate": "fal",
                 "candidate_target": "fal-ai/echo", "shadow_percent": 100,
                 "baseline_percent": 0,
                 "shadow_policy": {"allow_fields": ["prompt", "image"]}}],
    )
    response = await h.client.post(
        "/v1/models/acme/img/predictions",
        json={"input": {"prompt": "hi", "image": image}}, headers=h.headers)
    assert response.status == 201, await response.text()
    await h.settle()
    assert [(job.scope, job.input) for job in fal.jobs.values()] == [
        ("fal-ai/echo", {"prompt": "hi", "image": image})]


def _promoted_route() -> RouteSettings:
    return RouteSettings.model_validate({
        "model": "acme/echo", "provider": "old", "target": "old-name",
        "candidate": "new", "candidate_target": "new-name",
        "shadow_percent": 100, "shadow_policy": POLICY})


@pytest.mark.parametrize(("baseline", "provider", "target"), [
    (0, "old", "old-name"),  # the shadow on the candidate, the old control after a promote
    (100, "new", "new-name"),  # the baseline on the control, the promoted candidate
])
def test_after_a_promote_each_arms_shadow_names_its_own_providers_model(
    baseline: int, provider: str, target: str
) -> None:
    route = _promoted_route()
    spec = route.spec().model_copy(update={"provider": "new", "candidate": "old",
                                             "baseline_percent": baseline})
    routed = Routed(route=route, model=route.model, version="hidden", deployment=None,
                    provider="new", target=target_of(route, "new"), spec=spec)
    new = NewJob(id="p1", model=route.model, version="hidden", deployment=None,
                 route=routed.key, provider="new", target=routed.target,
                 input={"prompt": "x"}, callback_token="t")
    shadow = shadow_job(routed, new)
    assert shadow is not None
    assert (shadow.provider, shadow.target) == (provider, target)
