"""Maps per route and provider (docs/translation.md): a fal route's input map reshapes the
app's input before the adapter, its output map reshapes fal's result before files are
copied (URLs it drops are never fetched), integers beyond 2^53 pass exactly, and a map
that fails at run time fails that one prediction with a one-line error."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.support.gateway import GatewayHarness
from tests.support.upstreams.fal import FAL_TOKEN, FakeFal

pytestmark = pytest.mark.timeout(60)

TOKEN_ENV = "CUTOVER_TEST_FAL_KEY"
TARGET = "fal-ai/fast-sdxl"
IMAGE_MAPS = {
    "input": '{prompt, seed, image_size: {width, height}, num_images: (.num_outputs // 1)}',
    "output": "[.images[].url]",
}
BIG = 18446744073709551615


@pytest.fixture
async def fal(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeFal]:
    monkeypatch.setenv(TOKEN_ENV, FAL_TOKEN)
    async with FakeFal(token=FAL_TOKEN) as server:
        yield server  # type: ignore[misc]


def fal_provider(server: FakeFal) -> dict[str, Any]:
    return {"kind": "fal", "base_url": server.url, "token_env": TOKEN_ENV,
            "jwks_url": f"{server.url}/.well-known/jwks.json", "file_hosts": ["127.0.0.1"],
            "max_concurrency": 4,
            "fetch_interval_s": 0.2, "fetch_max_interval_s": 0.3}


async def gateway_with(make_gateway: Callable[..., Any], fal: FakeFal,
                       maps: dict[str, Any]) -> GatewayHarness:
    route = {"model": "acme/sdxl", "provider": "fal", "target": TARGET, "maps": maps}
    harness: GatewayHarness = await make_gateway(
        providers={"fal": fal_provider(fal), "fake": {"kind": "fake"}}, routes=[route])
    return harness


async def create(h: GatewayHarness, data: dict[str, Any]) -> dict[str, Any]:
    response = await h.client.post("/v1/models/acme/sdxl/predictions", json={"input": data},
                                   headers=h.headers)
    assert response.status == 201, await response.text()
    created: dict[str, Any] = await response.json()
    return created


async def submitted(h: GatewayHarness, fal: FakeFal, data: dict[str, Any]) -> tuple[str, Any]:
    created = await create(h, data)
    await h.settle()
    job = list(fal.jobs.values())[-1]  # the newest
    return created["id"], job


async def test_the_input_map_reshapes_what_fal_gets_and_the_output_map_what_the_app_sees(
    make_gateway: Callable[..., Any], fal: FakeFal
) -> None:
    h = await gateway_with(make_gateway, fal, {"fal": IMAGE_MAPS})
    pid, job = await submitted(h, fal, {"prompt": "a cat", "width": 1024, "height": 768,
                                        "num_outputs": 2, "seed": BIG})
    assert job.input == {"prompt": "a cat", "seed": BIG,
                         "image_size": {"width": 1024, "height": 768}, "num_images": 2}
    fal.files.update({"a.png": b"A", "b.png": b"B", "thumb.png": b"T"})
    fal.finish(job, {"images": [{"url": f"{fal.url}/files/a.png", "width": 1024},
                                {"url": f"{fal.url}/files/b.png", "width": 1024}],
                     "thumbnail": {"url": f"{fal.url}/files/thumb.png"}, "seed": BIG})
    done = await h.wait_for(pid, "succeeded")
    assert isinstance(done["output"], list) and len(done["output"]) == 2
    assert all(url.startswith("https://gateway.test/assets/") for url in done["output"])
    assert sorted(fal.fetched) == ["a.png", "b.png"]  # the dropped thumbnail: never fetched


async def test_a_seed_beyond_2_53_reaches_fal_and_the_app_exactly(
    make_gateway: Callable[..., Any], fal: FakeFal
) -> None:
    maps = {"input": "{prompt, seed}", "output": "{seed: .seed, echoed: .seeds[0]}"}
    h = await gateway_with(make_gateway, fal, {"fal": maps})
    pid, job = await submitted(h, fal, {"prompt": "p", "seed": BIG})
    assert job.input["seed"] == BIG
    fal.finish(job, {"seed": BIG, "seeds": [BIG - 1]})
    done = await h.wait_for(pid, "succeeded")
    assert done["output"] == {"seed": BIG, "echoed": BIG - 1}


async def test_an_output_map_failing_at_run_time_fails_only_that_prediction(
    make_gateway: Callable[..., Any], fal: FakeFal
) -> None:
    h = await gateway_with(make_gateway, fal, {"fal": {"output": "[.images[].url]"}})
    bad, bad_job = await submitted(h, fal, {"prompt": "a"})
    good, good_job = await submitted(h, fal, {"prompt": "b"})
    fal.finish(bad_job, {"images": 3})
    fal.finish(good_job, {"images": [{"url": "https://elsewhere.test/x.png"}]})
    failed = await h.wait_for(bad, "failed")
    assert failed["error"] == ("the output map of provider 'fal' failed: "
                               "Cannot iterate over number (3)")
    assert "\n" not in failed["error"]
    assert (await h.wait_for(good, "succeeded"))["output"] == ["https://elsewhere.test/x.png"]


async def test_an_input_map_failing_fails_the_prediction_before_any_provider_call(
    make_gateway: Callable[..., Any], fal: FakeFal
) -> None:
    h = await gateway_with(make_gateway, fal, {"fal": {"input": "{n: (.num_outputs + 1)}"}})
    created = await create(h, {"num_outputs": "two"})
    failed = await h.wait_for(created["id"], "failed")
    assert failed["error"] == ("the input map of provider 'fal' failed: "
                               'string ("two") and number (1) cannot be added')
    assert fal.jobs == {}
    ok = await create(h, {"num_outputs": 1})
    await h.settle()
    assert [j.input for j in fal.jobs.values()] == [{"n": 2}]
    assert (await h.get(ok["id"]))["status"] in {"starting", "processing"}


async def test_an_input_map_giving_no_object_fails_the_prediction(
    make_gateway: Callable[..., Any], fal: FakeFal
) -> None:
    h = await gateway_with(make_gateway, fal, {"fal": {"input": ".prompt"}})
    created = await create(h, {"prompt": "x"})
    failed = await h.wait_for(created["id"], "failed")
    assert failed["error"] == "the input map of provider 'fal' gave str, not a JSON object"


ADMIN_TOKEN = "adm_maps_test"  # a test value, not a credential
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


async def live_gateway(make_gateway: Callable[..., Any], fal: FakeFal) -> GatewayHarness:
    route = {"model": "acme/sdxl", "provider": "fake", "candidate": "fal",
             "candidate_target": TARGET, "shadow_percent": 100, "baseline_percent": 0,
             "shadow_policy": {"allow_fields": ["prompt", "width"]},
             "maps": {"fal": {"input": "{prompt}"}}}
    harness: GatewayHarness = await make_gateway(
        providers={"fal": fal_provider(fal), "fake": {"kind": "fake", "max_concurrency": 9}},
        routes=[route], admin={"tokens": [{"name": "ops", "token": ADMIN_TOKEN}]})
    return harness


async def test_maps_are_shown_changed_live_audited_and_run_by_shadows(
    make_gateway: Callable[..., Any], fal: FakeFal
) -> None:
    h = await live_gateway(make_gateway, fal)
    await create(h, {"prompt": "a", "width": 64})
    await h.settle()
    assert [j.input for j in fal.jobs.values()] == [{"prompt": "a"}]  # the shadow, mapped
    new = {"fal": {"input": "{prompt, image_size: {width}}", "output": "[.images[].url]"}}
    response = await h.client.patch("/admin/routes/acme/sdxl", headers=ADMIN,
                                    json={"maps": new, "reason": "fal takes image_size"})
    assert response.status == 200, await response.text()
    shown = await (await h.client.get("/admin/routes/acme/sdxl", headers=ADMIN)).json()
    assert shown["spec"]["maps"] == new
    change = shown["changes"][0]
    assert (change["who"], change["reason"]) == ("ops", "fal takes image_size")
    assert change["before"]["maps"] == {"fal": {"input": "{prompt}", "output": None}}
    assert change["after"]["maps"] == new
    await create(h, {"prompt": "b", "width": 64})
    await h.settle()
    assert list(fal.jobs.values())[-1].input == {"prompt": "b", "image_size": {"width": 64}}


@pytest.mark.parametrize(("maps", "detail"), [
    ({"fal": {"output": "[.images[].url"}},
     "route 'acme/sdxl': maps.fal.output does not compile: jq: error: syntax error"),
    ({"runpod": {"input": "."}},
     "route 'acme/sdxl': maps for runpod, not configured provider(s)"),
    ({"fal": {"inputs": "."}}, "route 'acme/sdxl': maps must be"),
])
async def test_the_admin_api_refuses_a_bad_map_naming_the_route_and_changes_nothing(
    make_gateway: Callable[..., Any], fal: FakeFal, maps: dict[str, Any], detail: str
) -> None:
    h = await live_gateway(make_gateway, fal)
    before = await (await h.client.get("/admin/routes/acme/sdxl", headers=ADMIN)).json()
    response = await h.client.patch("/admin/routes/acme/sdxl", headers=ADMIN,
                                    json={"maps": maps, "reason": "try"})
    assert response.status == 422
    assert (await response.json())["detail"].startswith(detail)
    after = await (await h.client.get("/admin/routes/acme/sdxl", headers=ADMIN)).json()
    assert after["spec"] == before["spec"] and after["changes"] == before["changes"]


async def test_a_shadow_on_the_candidate_is_sent_the_candidates_target(
    make_gateway: Callable[..., Any], fal: FakeFal
) -> None:
    h = await live_gateway(make_gateway, fal)
    await create(h, {"prompt": "a"})
    await h.settle()
    assert [j.scope for j in fal.jobs.values()] == [TARGET]


async def test_the_output_map_runs_on_every_interim_output_and_the_final_one(
    make_gateway: Callable[..., Any],
) -> None:
    from contracts.job import JobState

    route = {"model": "acme/plain", "provider": "fake",
             "maps": {"fake": {"output": "map(ascii_upcase)"}}}
    h: GatewayHarness = await make_gateway(routes=[route])
    response = await h.client.post("/v1/models/acme/plain/predictions",
                                   json={"input": {"prompt": "x"}}, headers=h.headers)
    pid = (await response.json())["id"]
    await h.settle()
    assert await h.deliver(pid, JobState.RUNNING, output=["he", "llo"]) == 200
    await h.settle()
    assert (await h.get(pid))["output"] == ["HE", "LLO"]
    assert await h.deliver(pid, JobState.RUNNING, output=["he", 3]) == 200  # map fails
    await h.settle()
    got = await h.get(pid)
    assert got["status"] == "processing"  # withheld, not failed
    assert got["output"] == ["HE", "LLO"]  # the last interim output it could map
    assert await h.deliver(pid, JobState.COMPLETED, output=["he", "llo", "!"]) == 200
    done = await h.wait_for(pid, "succeeded")
    assert done["output"] == ["HE", "LLO", "!"]


class _StoppedClock:
    """A clock whose monotonic time moves only when told (the interim budget's)."""

    def __init__(self) -> None:
        self.at = 0.0

    def monotonic(self) -> float:
        return self.at


async def test_an_interim_output_past_its_map_budget_keeps_the_one_shown_before(
    make_gateway: Callable[..., Any],
) -> None:
    """The output map ran on the whole output so far at every interim update (quadratic
    for a stream of many chunks). Past its budget an update keeps the output shown
    before and brings its logs; with time the budget returns; the final output is always
    mapped whole."""
    from contracts.job import JobState
    from gateway.app import _FINALIZER
    from gateway.finalizer import InterimBudget

    route = {"model": "acme/plain", "provider": "fake",
             "maps": {"fake": {"output": "map(ascii_upcase)"}}}
    h: GatewayHarness = await make_gateway(routes=[route])
    clock = _StoppedClock()
    h.app[_FINALIZER].interim = InterimBudget(share=0.1, free_s=0.0, clock=clock)  # type: ignore[arg-type]
    response = await h.client.post("/v1/models/acme/plain/predictions",
                                   json={"input": {"prompt": "x"}}, headers=h.headers)
    pid = (await response.json())["id"]
    await h.settle()
    chunks = [f"t{n} " for n in range(6)]

    async def interim(count: int) -> dict[str, Any]:
        assert await h.deliver(pid, JobState.RUNNING, output=chunks[:count],
                               logs=f"chunk {count}\n") == 200
        await h.settle()
        return await h.get(pid)

    assert (await interim(1))["output"] == ["T0 "]  # the first is always mapped
    over = await interim(2)  # no time has passed: the budget is spent
    assert over["output"] == ["T0 "] and over["logs"].endswith("chunk 2\n")
    assert (await interim(3))["output"] == ["T0 "]
    clock.at += 60.0  # a minute on: the map's share of it is left
    assert (await interim(4))["output"] == ["T0 ", "T1 ", "T2 ", "T3 "]
    assert await h.deliver(pid, JobState.COMPLETED, output=chunks) == 200
    done = await h.wait_for(pid, "succeeded")
    assert done["output"] == [c.upper() for c in chunks]
