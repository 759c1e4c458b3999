"""The Replicate API contract a real client depends on (the list queries on every backend).

Happy paths of docs/replicate-api.md §2, §3, §4 and §9: the three version forms, the
models and deployments routes, routes without ``/v1``, JS-style requests, the shape of
every prediction object (§4.3, checked by hand and by parsing with the real
``replicate`` 1.0.7 models), ``Prefer: wait``, idempotency, ``Cancel-After``, cancel at
every stage, list pagination, and the auxiliary endpoints.
"""

from __future__ import annotations

import asyncio
import re
from datetime import datetime, timedelta
from typing import Any

import aiohttp
import pytest
import replicate.account
import replicate.deployment
import replicate.model
import replicate.prediction
import replicate.version
import sqlalchemy as sa
from aiohttp import ClientResponse

from contracts.job import JobState
from gateway import ids
from gateway.app import LOOPS
from gateway.clock import utcnow
from gateway.loop import Loop
from gateway.store.jobs import NewJob
from gateway.store.schema import jobs
from tests.support.gateway import TOKEN, VERSION, GatewayHarness

PUBLIC_URL = "https://gateway.test"  # tests/support/gateway.py settings_dict
STATUSES = {"starting", "processing", "succeeded", "failed", "canceled"}
RFC3339_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")
ECHO = {"version": VERSION, "input": {"prompt": "hi"}}


# --- helpers ------------------------------------------------------------------------------


def assert_prediction(body: dict[str, Any]) -> replicate.prediction.Prediction:
    """Check ``body`` against §4.1/§4.3 and parse it with the real client's model."""
    assert re.fullmatch(r"[a-z0-9]{26}", body["id"]), body["id"]
    assert isinstance(body["model"], str) and "/" in body["model"]
    assert isinstance(body["version"], str) and body["version"]
    assert body["status"] in STATUSES
    assert RFC3339_Z.match(body["created_at"]), body["created_at"]
    for key in ("started_at", "completed_at", "deadline"):
        assert body.get(key) is None or RFC3339_Z.match(body[key]), (key, body[key])
    get_url = f"{PUBLIC_URL}/v1/predictions/{body['id']}"
    assert body["urls"]["get"] == get_url
    assert body["urls"]["cancel"] == f"{get_url}/cancel"
    assert all(isinstance(v, str) and v.startswith(PUBLIC_URL + "/") for v in body["urls"].values())
    assert body["input"] is None or isinstance(body["input"], dict)
    assert body["logs"] is None or isinstance(body["logs"], str)
    assert body["error"] is None or isinstance(body["error"], str)
    assert isinstance(body["data_removed"], bool) and body["source"] == "api"
    if body["status"] not in {"succeeded", "failed", "canceled"}:
        assert "predict_time" not in body["metrics"]  # terminal states only (§4.1)
    parsed = replicate.prediction.Prediction(**body)
    assert (parsed.id, parsed.status) == (body["id"], body["status"])
    return parsed


async def ok(response: ClientResponse, status: int = 200) -> dict[str, Any]:
    text = await response.text()
    assert response.status == status, text
    assert response.content_type == "application/json"
    return await response.json()


def loop_named(gateway: GatewayHarness, name: str) -> Loop:
    return next(loop for loop in gateway.app[LOOPS] if loop.name == name)


def wire_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def query_time(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def post(gateway: GatewayHarness, path: str, body: Any = None, **headers: str):
    return await gateway.client.post(path, json=body, headers={**gateway.headers, **headers})


async def submitted(gateway: GatewayHarness, body: dict[str, Any] = ECHO) -> dict[str, Any]:
    """A prediction the fake provider has accepted (``starting``, job ``queued``)."""
    created = await gateway.create(body)
    await gateway.settle()
    assert [r.job_id for r in gateway.fake.submitted][-1] == created["id"]
    return created


async def until_submitted(gateway: GatewayHarness) -> str:
    """Settle until the fake has a submit (the create is racing this); its job id."""
    while not gateway.fake.submitted:
        await gateway.settle()
        await asyncio.sleep(0.005)
    return gateway.fake.submitted[0].job_id


# --- creating: the three version forms and the other routes ---------------------------------


async def test_the_three_version_forms_route_and_report_the_version(make_gateway):
    gateway = await make_gateway(providers={"fake": {"kind": "fake", "max_concurrency": 3}})
    forms = {"acme/echo": "hidden", f"acme/echo:{VERSION}": VERSION, VERSION: VERSION}
    for version, reported in forms.items():
        response = await post(gateway, "/v1/predictions", {"version": version, "input": {}})
        body = await ok(response, 201)
        assert_prediction(body)
        assert (body["model"], body["version"], body["status"]) == (
            "acme/echo",
            reported,
            "starting",
        )
        assert response.headers["Location"] == body["urls"]["get"]
        assert "deployment" not in body
    await gateway.settle()
    assert [(r.model, r.version) for r in gateway.fake.submitted] == [
        ("acme/echo", "hidden"),
        ("acme/echo", VERSION),
        ("acme/echo", VERSION),
    ]


async def test_the_models_route_creates_an_official_model_prediction(gateway: GatewayHarness):
    body = await ok(await post(gateway, "/v1/models/acme/plain/predictions", {"input": {}}), 201)
    assert_prediction(body)
    assert (body["model"], body["version"]) == ("acme/plain", "hidden")


async def test_the_deployments_route_creates_and_echoes_the_deployment(gateway: GatewayHarness):
    path = "/v1/deployments/acme/plain/predictions"
    body = await ok(await post(gateway, path, {"input": {"a": 1}}), 201)
    assert_prediction(body)
    assert (body["model"], body["deployment"], body["input"]) == (
        "acme/plain",
        "acme/plain",
        {"a": 1},
    )
    assert (await gateway.get(body["id"]))["deployment"] == "acme/plain"


async def test_every_route_is_also_served_without_the_v1_prefix(gateway: GatewayHarness):
    created = [
        await ok(await post(gateway, "/predictions", ECHO), 201),
        await ok(await post(gateway, "/models/acme/plain/predictions", {"input": {}}), 201),
        await ok(await post(gateway, "/deployments/acme/plain/predictions", {"input": {}}), 201),
    ]
    for body in created:
        assert_prediction(body)
        got = await ok(
            await gateway.client.get(f"/predictions/{body['id']}", headers=gateway.headers)
        )
        assert got["id"] == body["id"]
    canceled = await ok(await post(gateway, f"/predictions/{created[0]['id']}/cancel"))
    assert_prediction(canceled)
    listed = await ok(await gateway.client.get("/predictions", headers=gateway.headers))
    assert {p["id"] for p in listed["results"]} == {b["id"] for b in created}
    for path in ("/account", "/models/acme/echo", f"/models/acme/echo/versions/{VERSION}"):
        await ok(await gateway.client.get(path, headers=gateway.headers))


async def test_js_style_requests_with_an_empty_json_body_are_accepted(gateway: GatewayHarness):
    # replicate-javascript sends Content-Type: application/json on every request, GETs and
    # body-less POSTs included (§1).
    js = {**gateway.headers, "Content-Type": "application/json"}
    created = await ok(await gateway.client.post("/v1/predictions", json=ECHO, headers=js), 201)
    prediction_id = created["id"]
    for path in (
        f"/v1/predictions/{prediction_id}",
        "/v1/predictions",
        "/v1/account",
        "/v1/models/acme/echo",
        f"/v1/models/acme/echo/versions/{VERSION}",
        "/v1/deployments/acme/plain",
    ):
        await ok(await gateway.client.get(path, data=b"", headers=js))
    cancel = f"/v1/predictions/{prediction_id}/cancel"
    assert_prediction(await ok(await gateway.client.post(cancel, data=b"", headers=js)))


async def test_the_legacy_webhook_completed_field_is_accepted(gateway: GatewayHarness):
    hook = "http://127.0.0.1:9/hook"  # allow-listed; nothing here delivers to it
    body = await gateway.create({**ECHO, "webhook_completed": hook})
    assert (body["webhook"], body["webhook_events_filter"]) == (hook, ["completed"])


async def test_webhook_and_events_filter_are_echoed(gateway: GatewayHarness):
    hook = "http://127.0.0.1:9/hook?customId=1"
    body = await gateway.create({**ECHO, "webhook": hook, "webhook_events_filter": ["completed"]})
    assert_prediction(body)
    assert (body["webhook"], body["webhook_events_filter"]) == (hook, ["completed"])


# --- the prediction object through its life ---------------------------------------------------


async def test_every_prediction_object_meets_the_client_contract(gateway: GatewayHarness):
    created = await gateway.create(ECHO)
    plain = await post(gateway, "/v1/models/acme/plain/predictions", {"input": {}})
    seen = [created, await ok(plain, 201)]
    await gateway.settle()
    seen.append(await gateway.get(created["id"]))
    assert await gateway.deliver(created["id"], JobState.RUNNING, logs="step 1\n") == 200
    running = await gateway.wait_for(created["id"], "processing")
    assert running["started_at"] and running["logs"] == "step 1\n"
    seen.append(running)
    assert await gateway.deliver(created["id"], JobState.COMPLETED, output=["a", "b"]) == 200
    done = await gateway.wait_for(created["id"], "succeeded")
    assert done["output"] == ["a", "b"] and done["completed_at"]
    assert done["metrics"]["predict_time"] >= 0 and done["metrics"]["total_time"] >= 0
    seen.append(done)
    seen.append(await ok(await post(gateway, f"/v1/predictions/{seen[1]['id']}/cancel")))
    listed = await ok(await gateway.client.get("/v1/predictions", headers=gateway.headers))
    seen.extend(listed["results"])
    for body in seen:
        assert_prediction(body)
    assert wire_time(done["created_at"]) <= wire_time(done["started_at"])
    assert wire_time(done["started_at"]) <= wire_time(done["completed_at"])


# --- Prefer: wait -----------------------------------------------------------------------------


async def test_prefer_wait_answers_starting_in_time_when_unfinished(gateway: GatewayHarness):
    async def provider_starts() -> None:
        job_id = await until_submitted(gateway)
        assert await gateway.deliver(job_id, JobState.RUNNING) == 200
        await gateway.settle()

    driver = asyncio.create_task(provider_starts())
    clock = asyncio.get_running_loop().time
    started = clock()
    response = await post(gateway, "/v1/predictions", ECHO, Prefer="wait=1")
    elapsed = clock() - started
    await asyncio.wait_for(driver, 5)
    body = await ok(response, 201)
    assert_prediction(body)
    assert 0.9 <= elapsed < 1.5, elapsed  # Python reads for N + 0.5 s (§3.2)
    # Running upstream, but the window closed before the output was final: the clients
    # only poll after a blocking create when the status is `starting` (§3.2).
    assert body["status"] == "starting"
    assert (await gateway.get(body["id"]))["status"] == "processing"


async def test_prefer_wait_returns_the_finished_prediction(gateway: GatewayHarness):
    async def provider_finishes() -> None:
        job_id = await until_submitted(gateway)
        assert await gateway.deliver(job_id, JobState.COMPLETED, output="done") == 200
        await gateway.settle()

    driver = asyncio.create_task(provider_finishes())
    clock = asyncio.get_running_loop().time
    started = clock()
    response = await post(gateway, "/v1/predictions", ECHO, Prefer="wait=10")
    elapsed = clock() - started
    await asyncio.wait_for(driver, 5)
    body = await ok(response, 201)
    assert_prediction(body)
    assert (body["status"], body["output"]) == ("succeeded", "done")
    assert elapsed < 5, elapsed


# --- idempotency ---------------------------------------------------------------------------


async def test_a_retried_create_with_the_same_key_returns_the_same_prediction(
    gateway: GatewayHarness,
):
    first = await ok(await post(gateway, "/v1/predictions", ECHO, **{"Idempotency-Key": "k1"}), 201)
    await gateway.settle()
    again = await post(gateway, "/v1/predictions", ECHO, **{"Idempotency-Key": "k1"})
    second = await ok(again, 201)
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert second["id"] == first["id"]
    await gateway.settle()
    assert [r.job_id for r in gateway.fake.submitted] == [first["id"]]


async def test_the_same_key_with_another_request_is_409(gateway: GatewayHarness):
    key = {"Idempotency-Key": "k2"}
    first = await ok(await post(gateway, "/v1/predictions", ECHO, **key), 201)
    other_body = {"version": VERSION, "input": {"prompt": "something else"}}
    other_route = {"input": ECHO["input"]}  # the same input, through another endpoint
    for path, body in (
        ("/v1/predictions", other_body),
        ("/v1/models/acme/echo/predictions", other_route),
    ):
        response = await post(gateway, path, body, **key)
        assert response.status == 409, await response.text()
        assert response.content_type == "application/problem+json"
        assert "Idempotency-Key" in (await response.json())["detail"]
    listed = await ok(await gateway.client.get("/v1/predictions", headers=gateway.headers))
    assert [p["id"] for p in listed["results"]] == [first["id"]]


async def test_concurrent_creates_with_one_key_make_one_job(gateway: GatewayHarness):
    key = {"Idempotency-Key": "k3"}
    responses = await asyncio.gather(
        *(post(gateway, "/v1/predictions", ECHO, **key) for _ in range(6))
    )
    bodies = [await ok(response, 201) for response in responses]
    assert len({body["id"] for body in bodies}) == 1
    await gateway.settle()
    assert [r.job_id for r in gateway.fake.submitted] == [bodies[0]["id"]]
    listed = await ok(await gateway.client.get("/v1/predictions", headers=gateway.headers))
    assert len(listed["results"]) == 1


async def test_the_same_key_with_another_cancel_after_is_409(gateway: GatewayHarness):
    key = {"Idempotency-Key": "k4"}
    first = await ok(
        await post(gateway, "/v1/predictions", ECHO, **key, **{"Cancel-After": "5m"}), 201
    )
    for same in ("5m", "300", "300s", "0h5m"):  # one deadline, however it is written
        again = await post(gateway, "/v1/predictions", ECHO, **key, **{"Cancel-After": same})
        assert (await ok(again, 201))["id"] == first["id"], same
        assert again.headers.get("Idempotent-Replayed") == "true"
    for other in ({"Cancel-After": "10m"}, {}):  # another deadline, or none
        response = await post(gateway, "/v1/predictions", ECHO, **key, **other)
        assert response.status == 409, await response.text()
        assert response.content_type == "application/problem+json"
        detail = (await response.json())["detail"]
        assert "Idempotency-Key 'k4'" in detail and "Cancel-After" in detail
    unbounded = await ok(
        await post(gateway, "/v1/predictions", ECHO, **{"Idempotency-Key": "k5"}), 201
    )
    response = await post(
        gateway, "/v1/predictions", ECHO, **{"Idempotency-Key": "k5", "Cancel-After": "1h"}
    )
    assert response.status == 409, await response.text()
    listed = await ok(await gateway.client.get("/v1/predictions", headers=gateway.headers))
    assert {p["id"] for p in listed["results"]} == {first["id"], unbounded["id"]}


async def test_idempotency_keys_belong_to_the_api_token(make_gateway):
    other_token = "r8_other_test_token"  # a test value, not a credential
    gateway = await make_gateway(gateway={"api_tokens": [TOKEN, other_token]})
    other = {"Authorization": f"Token {other_token}"}
    key = {"Idempotency-Key": "shared-key"}
    mine = await ok(await post(gateway, "/v1/predictions", ECHO, **key), 201)
    theirs_response = await post(gateway, "/v1/predictions", ECHO, **key, **other)
    theirs = await ok(theirs_response, 201)
    assert theirs["id"] != mine["id"]
    assert "Idempotent-Replayed" not in theirs_response.headers
    # Each token still replays its own prediction, and conflicts only with its own.
    again = await post(gateway, "/v1/predictions", ECHO, **key, **other)
    assert (await ok(again, 201))["id"] == theirs["id"]
    other_body = {"version": VERSION, "input": {"prompt": "something else"}}
    assert (await post(gateway, "/v1/predictions", other_body, **key, **other)).status == 409
    again = await post(gateway, "/v1/predictions", ECHO, **key)
    assert (await ok(again, 201))["id"] == mine["id"]
    # The longest key accepted still fits the store's column once scoped.
    longest = {"Idempotency-Key": "k" * 238}
    first = await ok(await post(gateway, "/v1/predictions", ECHO, **longest), 201)
    again = await post(gateway, "/v1/predictions", ECHO, **longest)
    assert (await ok(again, 201))["id"] == first["id"]
    async with gateway.store.engine.connect() as conn:
        stored = (await conn.execute(sa.select(jobs.c.idempotency_key))).scalars().all()
    assert all(TOKEN not in k and other_token not in k and len(k) <= 255 for k in stored)
    assert len(set(stored)) == 3


# --- Cancel-After ---------------------------------------------------------------------------


async def test_cancel_after_sets_the_deadline(make_gateway):
    gateway = await make_gateway(gateway={"max_job_lifetime_s": 7200})
    for header, seconds in (("30", 30), ("30s", 30), ("5m", 300), ("1h30m45s", 5445)):
        body = await ok(
            await post(gateway, "/v1/predictions", ECHO, **{"Cancel-After": header}), 201
        )
        assert_prediction(body)
        lifetime = wire_time(body["deadline"]) - wire_time(body["created_at"])
        assert abs(lifetime - timedelta(seconds=seconds)) < timedelta(seconds=1), header
    plain = await gateway.create(ECHO)
    assert "deadline" not in plain


async def test_cancel_after_is_capped_by_the_maximum_job_lifetime(make_gateway):
    gateway = await make_gateway(gateway={"max_job_lifetime_s": 600})
    body = await ok(await post(gateway, "/v1/predictions", ECHO, **{"Cancel-After": "10h"}), 201)
    lifetime = wire_time(body["deadline"]) - wire_time(body["created_at"])
    assert abs(lifetime - timedelta(seconds=600)) < timedelta(seconds=1)


async def _past_deadline(gateway: GatewayHarness, prediction_id: str) -> None:
    """Move the app's clock past the deadline (instead of waiting out the 5 s minimum of
    Cancel-After)."""
    deadline = (await gateway.store.get(prediction_id)).deadline
    assert deadline is not None
    gateway.clock.advance(deadline - gateway.clock.now() + timedelta(seconds=1))


async def test_a_deadline_passed_before_start_cancels_without_submitting(gateway: GatewayHarness):
    created = await ok(await post(gateway, "/v1/predictions", ECHO, **{"Cancel-After": "5s"}), 201)
    await _past_deadline(gateway, created["id"])
    assert await loop_named(gateway, "reaper").run_once() == 1
    await gateway.settle()
    done = await gateway.get(created["id"])
    assert_prediction(done)
    assert done["status"] == "canceled" and "deadline" in done["error"]
    assert gateway.fake.submitted == []


async def test_the_dispatcher_never_submits_a_job_past_its_deadline(gateway: GatewayHarness):
    created = await ok(await post(gateway, "/v1/predictions", ECHO, **{"Cancel-After": "5s"}), 201)
    await _past_deadline(gateway, created["id"])
    await gateway.settle()
    assert gateway.fake.submitted == []
    assert (await gateway.get(created["id"]))["status"] == "canceled"


# --- cancel at every stage --------------------------------------------------------------------


async def test_cancel_before_submit_never_submits(gateway: GatewayHarness):
    created = await gateway.create(ECHO)
    answer = await ok(await post(gateway, f"/v1/predictions/{created['id']}/cancel"))
    assert_prediction(answer)
    assert answer["id"] == created["id"]
    await gateway.settle()
    done = await gateway.get(created["id"])
    assert done["status"] == "canceled" and done["output"] is None
    assert gateway.fake.submitted == [] and gateway.fake.cancel_calls == []


async def test_cancel_in_flight_asks_the_provider_and_ends_canceled(gateway: GatewayHarness):
    created = await submitted(gateway)
    answer = await ok(await post(gateway, f"/v1/predictions/{created['id']}/cancel"))
    assert answer["status"] == "starting"  # the provider decides; nothing is final yet
    await gateway.settle()
    assert gateway.fake.cancel_calls == [gateway.fake.provider_job_id(created["id"])]
    assert await gateway.deliver(created["id"], JobState.CANCELED) == 200
    done = await gateway.wait_for(created["id"], "canceled")
    assert_prediction(done)
    assert done["completed_at"]


async def test_cancel_after_completion_changes_nothing(gateway: GatewayHarness):
    created = await submitted(gateway)
    assert await gateway.deliver(created["id"], JobState.COMPLETED, output="kept") == 200
    done = await gateway.wait_for(created["id"], "succeeded")
    answer = await ok(await post(gateway, f"/v1/predictions/{created['id']}/cancel"))
    assert answer == done
    await gateway.settle()
    assert await gateway.get(created["id"]) == done
    assert gateway.fake.cancel_calls == []


async def test_cancel_is_idempotent(gateway: GatewayHarness):
    created = await submitted(gateway)
    path = f"/v1/predictions/{created['id']}/cancel"
    answers = [await ok(await post(gateway, path)) for _ in range(3)]
    assert {a["status"] for a in answers} == {"starting"}
    await gateway.settle()
    assert len(gateway.fake.cancel_calls) == 1
    assert await gateway.deliver(created["id"], JobState.CANCELED) == 200
    done = await gateway.wait_for(created["id"], "canceled")
    assert await ok(await post(gateway, path)) == done
    await gateway.settle()
    assert len(gateway.fake.cancel_calls) == 1


# --- listing ----------------------------------------------------------------------------------


async def _store_jobs(gateway: GatewayHarness, count: int) -> list[str]:
    made = []
    for i in range(count):
        job, created = await gateway.store.create(
            NewJob(
                id=ids.new_prediction_id(),
                model="acme/echo",
                version=VERSION,
                deployment=None,
                route=f"acme/echo:{VERSION}",
                provider="fake",
                input={"i": i},
                callback_token=ids.callback_token(),
            )
        )
        assert created
        made.append(job.id)
    return made


async def _follow(gateway: GatewayHarness, url: str) -> dict[str, Any]:
    # Follow the URL verbatim, as both clients do: it must be absolute, on the gateway.
    assert url.startswith(f"{PUBLIC_URL}/v1/predictions?"), url
    return await ok(await gateway.client.get(url.removeprefix(PUBLIC_URL), headers=gateway.headers))


@pytest.mark.every_backend  # the list's keyset SQL and timestamp filters
async def test_list_pages_follow_next_and_previous(gateway: GatewayHarness):
    made = await _store_jobs(gateway, 205)
    first = await ok(await gateway.client.get("/v1/predictions", headers=gateway.headers))
    pages = [first]
    while pages[-1]["next"] is not None:
        pages.append(await _follow(gateway, pages[-1]["next"]))
    assert [len(p["results"]) for p in pages] == [100, 100, 5]
    assert first["previous"] is None
    listed = [p for page in pages for p in page["results"]]
    for body in listed[:3] + listed[-3:]:
        assert_prediction(body)
    order = [(p["created_at"], p["id"]) for p in listed]
    assert order == sorted(order, reverse=True)  # newest first, no duplicates
    assert [p["id"] for p in listed] == made[::-1]
    back = [pages[-1]]
    while back[-1]["previous"] is not None:
        back.append(await _follow(gateway, back[-1]["previous"]))
    assert [[p["id"] for p in page["results"]] for page in back] == [
        [p["id"] for p in page["results"]] for page in reversed(pages)
    ]


@pytest.mark.every_backend  # the list's keyset SQL and timestamp filters
async def test_list_filters_on_created_after_and_before(gateway: GatewayHarness):
    made, bounds = [], []
    for _ in range(3):
        bounds.append(query_time(utcnow()))
        made.append((await gateway.create(ECHO))["id"])
    bounds.append(query_time(utcnow()))

    async def listed(**query: str) -> list[str]:
        response = await gateway.client.get(
            "/v1/predictions", params=query, headers=gateway.headers
        )
        return [p["id"] for p in (await ok(response))["results"]]

    assert await listed(created_after=bounds[1]) == [made[2], made[1]]
    assert await listed(created_before=bounds[2]) == [made[1], made[0]]
    assert await listed(created_after=bounds[1], created_before=bounds[2]) == [made[1]]
    assert await listed(created_after=bounds[3]) == []
    assert await listed(created_after="2000-01-01T00:00:00+00:00") == made[::-1]


@pytest.mark.every_backend  # the list's keyset SQL and timestamp filters
async def test_list_filters_carry_over_to_the_next_page(gateway: GatewayHarness):
    older = await _store_jobs(gateway, 5)
    boundary = query_time(utcnow())
    newer = await _store_jobs(gateway, 101)
    response = await gateway.client.get(
        "/v1/predictions", params={"created_after": boundary}, headers=gateway.headers
    )
    first = await ok(response)
    second = await _follow(gateway, first["next"])
    assert [p["id"] for p in second["results"]] == newer[:1]
    assert second["next"] is None
    back = await _follow(gateway, second["previous"])
    assert [p["id"] for p in back["results"]] == [p["id"] for p in first["results"]]
    assert not set(older) & {p["id"] for p in first["results"] + second["results"]}


# --- models, versions, deployments, account, files, health -----------------------------------


async def test_get_model_parses_as_the_clients_model(gateway: GatewayHarness):
    body = await ok(await gateway.client.get("/v1/models/acme/echo", headers=gateway.headers))
    model = replicate.model.Model(**body)
    assert (model.owner, model.name, model.id) == ("acme", "echo", "acme/echo")
    assert model.url.startswith(PUBLIC_URL + "/")
    assert model.latest_version is not None and model.latest_version.id == VERSION


async def test_get_version_parses_as_the_clients_version(gateway: GatewayHarness):
    path = f"/v1/models/acme/echo/versions/{VERSION}"
    body = await ok(await gateway.client.get(path, headers=gateway.headers))
    version = replicate.version.Version(**body)
    assert version.id == VERSION
    assert version.created_at.tzinfo is not None
    assert isinstance(version.cog_version, str) and isinstance(version.openapi_schema, dict)
    listed = await ok(
        await gateway.client.get("/v1/models/acme/echo/versions", headers=gateway.headers)
    )
    assert [replicate.version.Version(**v).id for v in listed["results"]] == [VERSION]


async def test_get_deployment_parses_as_the_clients_deployment(gateway: GatewayHarness):
    body = await ok(await gateway.client.get("/v1/deployments/acme/plain", headers=gateway.headers))
    deployment = replicate.deployment.Deployment(**body)
    assert deployment.id == "acme/plain"
    assert deployment.current_release is not None
    assert deployment.current_release.model == "acme/plain"


async def test_get_account_parses_as_the_clients_account(gateway: GatewayHarness):
    body = await ok(await gateway.client.get("/v1/account", headers=gateway.headers))
    account = replicate.account.Account(**body)
    assert account.type in {"user", "organization"} and account.username


async def test_the_webhook_secret_is_a_standard_webhooks_key(gateway: GatewayHarness):
    path = "/v1/webhooks/default/secret"
    body = await ok(await gateway.client.get(path, headers=gateway.headers))
    prefix, _, key = body["key"].partition("_")
    assert prefix == "whsec" and key and "_" not in key


async def test_file_upload_answers_a_file_object(gateway: GatewayHarness):
    form = aiohttp.FormData()
    form.add_field("content", b"x", filename="file", content_type="application/octet-stream")
    response = await gateway.client.post("/v1/files", data=form, headers=gateway.headers)
    assert response.status == 201  # the Files API (§2.9; tests/integration/test_files.py)
    body = await response.json()
    assert body["name"] == "file" and body["etag"] and body["urls"]["get"]


async def test_health_and_ready_answer_without_a_token(gateway: GatewayHarness):
    assert await ok(await gateway.client.get("/health")) == {"status": "ok"}
    assert await ok(await gateway.client.get("/ready")) == {"status": "ready"}
