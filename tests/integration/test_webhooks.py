"""Outbound webhooks, in process, on every backend: events, filter, throttle, order, signing.

A real aiohttp receiver on 127.0.0.1 gets the deliveries; the gateway's loops are driven
with ``settle()``/``run_once()`` (docs/replicate-api.md §6).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from contracts.job import JobState
from gateway import wire
from gateway.http import keys
from gateway.store.schema import outbox
from gateway.webhooks import signing
from tests.support.gateway import GatewayHarness
from tests.support.outbox import (
    delivery_loop,
    make_due,
    observe,
    outbox_rows,
    start_job,
)
from tests.support.receiver import Received, Receiver, validate_with_replicate

pytestmark = pytest.mark.every_backend  # the store's SQL is the point

NODE = shutil.which("node")
ALL = ["start", "output", "logs", "completed"]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver() as rec:
        yield rec


async def secret_of(gateway: GatewayHarness) -> str:
    response = await gateway.client.get("/v1/webhooks/default/secret", headers=gateway.headers)
    assert response.status == 200
    return str((await response.json())["key"])


async def events_by_msg_id(gateway: GatewayHarness, job_id: str) -> dict[str, str]:
    return {row.msg_id: row.event for row in await outbox_rows(gateway.store.engine, job_id)}


# --- the filter ---------------------------------------------------------------------------

STEPS: list[tuple[JobState, dict[str, Any]]] = [
    (JobState.RUNNING, {"logs": "l1"}),  # start (and new logs)
    (JobState.RUNNING, {"output": ["o1"], "logs": "l1"}),  # output
    (JobState.RUNNING, {"output": ["o1"], "logs": "l1\nl2"}),  # logs
    (JobState.COMPLETED, {"output": ["o1", "o2"], "logs": "l1\nl2"}),  # completed (+output)
]


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        (None, ["output", "completed"]),  # the documented default (§6.2)
        (["start"], ["start"]),
        (["output"], ["output", "output"]),  # the last one carries status succeeded
        (["logs"], ["logs", "logs"]),
        (["completed"], ["completed"]),
        (["start", "completed"], ["start", "completed"]),
        (["output", "logs"], ["logs", "output", "logs", "output"]),
        (ALL, ["start", "output", "logs", "completed"]),
    ],
)
async def test_the_events_filter_is_honoured_exactly(
    make_gateway: Any, receiver: Receiver, events: list[str] | None, expected: list[str]
) -> None:
    gateway = await make_gateway(webhooks={"throttle_s": 0})
    job_id = await start_job(gateway, receiver.url(), events)
    for state, fields in STEPS:
        assert await gateway.deliver(job_id, state, **fields) == 200
        await gateway.settle()
    kinds = await events_by_msg_id(gateway, job_id)
    assert [kinds[r.webhook_id] for r in receiver.received] == expected
    statuses = [r.payload["status"] for r in receiver.received]
    ends_running = events in (["start"], ["logs"])  # no terminal event passes these filters
    assert statuses[-1] == ("processing" if ends_running else "succeeded")
    assert statuses[:-1] == ["processing"] * (len(statuses) - 1)
    if not ends_running:  # the full prediction, as GET has it
        assert receiver.received[-1].payload == await gateway.get(job_id)


async def test_the_default_filter_sends_output_and_completed_only(
    gateway: GatewayHarness, receiver: Receiver
) -> None:
    job_id = await start_job(gateway, receiver.url())
    await observe(gateway, job_id, JobState.RUNNING, logs="only logs")
    await gateway.settle()
    assert receiver.received == []  # start and logs are not in the default
    await observe(gateway, job_id, JobState.COMPLETED, output="done")
    await gateway.settle()
    assert [r.payload["status"] for r in receiver.received] == ["succeeded"]


# --- throttle and coalescing ------------------------------------------------------------


@pytest.mark.parametrize("kind", ["output", "logs"])
async def test_output_and_logs_are_coalesced_latest_wins(
    make_gateway: Any, receiver: Receiver, kind: str
) -> None:
    gateway = await make_gateway(webhooks={"throttle_s": 60})
    job_id = await start_job(gateway, receiver.url(), [kind, "completed"])
    delivery = delivery_loop(gateway)

    def step(n: int) -> dict[str, Any]:
        values = [f"v{i}" for i in range(n)]
        return {"output": values} if kind == "output" else {"logs": "\n".join(values)}

    await observe(gateway, job_id, JobState.RUNNING, **step(1))
    await observe(gateway, job_id, JobState.RUNNING, **step(2))  # replaces the waiting one
    assert await delivery.run_once() == 1
    await observe(gateway, job_id, JobState.RUNNING, **step(3))  # due only after 60 s
    assert await delivery.run_once() == 0
    await observe(gateway, job_id, JobState.RUNNING, **step(4))  # coalesced into it
    await make_due(gateway.store.engine)
    assert await delivery.run_once() == 1
    await observe(gateway, job_id, JobState.RUNNING, **step(5))  # throttled again...
    await observe(gateway, job_id, JobState.COMPLETED, output="end")  # ...then superseded
    await gateway.settle()

    sent = [r.payload for r in receiver.received]
    assert [p[kind] for p in sent[:2]] == [step(2)[kind], step(4)[kind]]
    assert [p["status"] for p in sent] == ["processing", "processing", "succeeded"]
    rows = await outbox_rows(gateway.store.engine, job_id)
    assert [(r.event, r.status) for r in rows] == [
        (kind, "delivered"),
        (kind, "delivered"),
        (kind, "superseded"),
        ("completed", "delivered"),
    ]


# --- order ------------------------------------------------------------------------------


async def test_deliveries_of_one_prediction_go_one_at_a_time_in_order(
    make_gateway: Any, receiver: Receiver
) -> None:
    gateway = await make_gateway(webhooks={"throttle_s": 0})
    jobs = [await start_job(gateway, receiver.url(f"/hook/{n}"), ALL) for n in range(2)]
    for job_id in jobs:  # three events wait for each job, none sent yet
        await observe(gateway, job_id, JobState.RUNNING, logs="l1")
        await observe(gateway, job_id, JobState.RUNNING, output=["o"], logs="l1")
        await observe(gateway, job_id, JobState.RUNNING, output=["o"], logs="l1\nl2")
    delivery = delivery_loop(gateway)
    for expected in ("start", "output", "logs"):
        assert await delivery.run_once() == 2  # one per prediction per round
        kinds = {}
        for job_id in jobs:
            kinds.update(await events_by_msg_id(gateway, job_id))
        assert [kinds[r.webhook_id] for r in receiver.received[-2:]] == [expected] * 2
    assert await delivery.run_once() == 0
    for job_id in jobs:
        await observe(gateway, job_id, JobState.COMPLETED, output="x")
    await gateway.settle()
    for n in range(2):
        statuses = [r.payload["status"] for r in receiver.received if r.path == f"/hook/{n}"]
        assert statuses == ["processing"] * 3 + ["succeeded"]


async def test_a_waiting_completed_event_holds_back_later_ones(
    make_gateway: Any, receiver: Receiver
) -> None:
    gateway = await make_gateway(webhooks={"retry_delays_s": [60]})
    job_id = await start_job(gateway, receiver.url(), ["completed"])
    receiver.reply(500)
    await observe(gateway, job_id, JobState.COMPLETED, output="x")
    await gateway.settle()
    (first,) = await outbox_rows(gateway.store.engine, job_id)
    assert (first.status, first.attempts, first.last_status_code) == ("pending", 1, 500)
    # A second event of the same job (here: an operator's replay) waits behind it.
    async with gateway.store.engine.begin() as conn:
        await conn.execute(
            outbox.insert().values(
                msg_id="msg_later", job_id=job_id, event="completed", url=first.url,
                payload=first.payload, status="pending", attempts=0,
                created_at=datetime.now(UTC), next_attempt_at=datetime.now(UTC),
            )
        )  # fmt: skip
    assert await delivery_loop(gateway).run_once() == 0
    await make_due(gateway.store.engine)
    await gateway.settle()
    assert [r.webhook_id for r in receiver.received] == [first.msg_id] * 2 + ["msg_later"]


async def test_no_non_terminal_snapshot_is_sent_after_the_terminal_one(
    make_gateway: Any, receiver: Receiver
) -> None:
    gateway = await make_gateway(webhooks={"throttle_s": 0})
    job_id = await start_job(gateway, receiver.url(), ALL)
    await observe(gateway, job_id, JobState.RUNNING, output=["a"])
    await observe(gateway, job_id, JobState.RUNNING, output=["a", "b"], logs="l")
    await observe(gateway, job_id, JobState.COMPLETED, output=["a", "b", "c"])
    await gateway.settle()
    assert [r.payload["status"] for r in receiver.received] == ["succeeded"]
    rows = await outbox_rows(gateway.store.engine, job_id)
    assert [r.status for r in rows] == ["superseded", "superseded", "delivered"]

    # A late provider snapshot changes nothing; a replayed stale snapshot is not sent.
    await observe(gateway, job_id, JobState.RUNNING, output=["late"])
    async with gateway.store.engine.begin() as conn:
        await conn.execute(outbox.update().where(outbox.c.id == rows[0].id).values(status="dead"))
    await gateway.app[keys.DEAD_LETTERS].replay(str(rows[0].id))
    await gateway.settle()
    assert len(receiver.received) == 1
    stale = (await outbox_rows(gateway.store.engine, job_id))[0]
    assert (stale.status, stale.attempts) == ("superseded", 0)


# --- what a delivery looks like ---------------------------------------------------------

TRICKY_INPUT = {
    "prompt": 'café ☕ 日本語 😀 \u2028 "quoted" </script>',
    "scale": 7.0,
    "tiny": 1e-7,
    "huge": 1e21,
    "nested": {"10": "ten", "2": "two", "z": [1.5, None, True]},
}


async def test_a_delivery_is_the_exact_signed_snapshot(
    gateway: GatewayHarness, receiver: Receiver
) -> None:
    url = receiver.url("/hooks/replicate?customId=123")
    job_id = await start_job(gateway, url, ["completed"], **TRICKY_INPUT)
    await observe(gateway, job_id, JobState.COMPLETED, output={"text": "ok ✓"})
    await gateway.settle()
    (got,) = receiver.received
    assert (got.path, got.query) == ("/hooks/replicate", "customId=123")
    assert got.headers["content-type"] == "application/json"
    assert got.headers["user-agent"] == "cutover"
    assert got.body == wire.compact_json(got.payload)  # compact JSON, byte for byte
    (row,) = await outbox_rows(gateway.store.engine, job_id)
    assert got.body == row.payload.encode() and got.webhook_id == row.msg_id
    assert abs(int(got.headers["webhook-timestamp"]) - datetime.now(UTC).timestamp()) < 60
    assert got.headers["webhook-signature"].startswith("v1,")
    validate_with_replicate(got, await secret_of(gateway))
    assert got.payload == await gateway.get(job_id)


async def test_the_webhook_id_is_stable_across_retries(
    make_gateway: Any, receiver: Receiver
) -> None:
    gateway = await make_gateway(webhooks={"retry_delays_s": [60, 60, 60]})
    receiver.reply(500, 503)
    job_id = await start_job(gateway, receiver.url(), ["completed"])
    await observe(gateway, job_id, JobState.COMPLETED, output="x")
    for _ in range(3):
        await gateway.settle()
        await make_due(gateway.store.engine)
    assert len({r.webhook_id for r in receiver.received}) == 1
    assert len(receiver.received) == 3
    secret = await secret_of(gateway)
    for got in receiver.received:  # each attempt signed with its own timestamp
        validate_with_replicate(got, secret)
    (row,) = await outbox_rows(gateway.store.engine, job_id)
    assert (row.status, row.attempts, row.last_status_code) == ("delivered", 3, 200)
    assert row.delivered_at is not None and row.last_error is None


async def test_secret_rotation_sends_both_signatures(make_gateway: Any, receiver: Receiver) -> None:
    old, new = signing.generate_secret(), signing.generate_secret()
    overlap = {
        "signing_secret": new,
        "previous_signing_secret": old,
        "previous_valid_until": (datetime.now(UTC) + timedelta(hours=1)).isoformat(),
    }
    gateway = await make_gateway(webhooks=overlap)
    assert await secret_of(gateway) == new
    job_id = await start_job(gateway, receiver.url(), ["completed"])
    await observe(gateway, job_id, JobState.COMPLETED, output="x")
    await gateway.settle()
    (got,) = receiver.received
    assert len(got.headers["webhook-signature"].split(" ")) == 2
    validate_with_replicate(got, new)
    validate_with_replicate(got, old)  # receivers not yet updated keep working
    if NODE is not None:
        assert js_validate([got], new) == [True]
        assert js_validate([got], old) == [True]


# --- the JS client's way --------------------------------------------------------------------

# What replicate-javascript's validateWebhook does (docs/replicate-api.md §6.5): an already-
# parsed body is re-serialised with JSON.stringify; the secret is split on "_" and its last part
# used; each space-separated signature's text after the first comma is compared with ===.
_JS_VALIDATE = r"""
const crypto = require("node:crypto");
function validateWebhook({ id, timestamp, signature, body, secret }) {
  if (!id || !timestamp || !signature) throw new Error("Missing required webhook headers");
  const text = typeof body === "object" ? JSON.stringify(body) : body;
  const key = Buffer.from(secret.split("_").pop(), "base64");
  const computed = crypto.createHmac("sha256", key)
    .update(`${id}.${timestamp}.${text}`).digest("base64");
  return signature.split(" ").map((s) => s.split(",")[1]).some((s) => s === computed);
}
let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => { input += chunk; });
process.stdin.on("end", () => {
  const cases = JSON.parse(input);
  process.stdout.write(JSON.stringify(cases.map((c) => validateWebhook({
    id: c.headers["webhook-id"], timestamp: c.headers["webhook-timestamp"],
    signature: c.headers["webhook-signature"], body: JSON.parse(c.body), secret: c.secret,
  }))));
});
"""


def js_validate(deliveries: list[Received], secret: str) -> list[bool]:
    assert NODE is not None
    cases = [
        {"headers": r.headers, "body": r.body.decode("utf-8"), "secret": secret} for r in deliveries
    ]
    done = subprocess.run(
        [NODE, "-e", _JS_VALIDATE],
        input=json.dumps(cases).encode(),
        capture_output=True,
        timeout=30,
        check=True,
    )
    return list(json.loads(done.stdout))


@pytest.mark.skipif(NODE is None, reason="node (Node.js) is not on PATH")
async def test_deliveries_validate_the_way_the_js_client_checks_them(
    make_gateway: Any, receiver: Receiver
) -> None:
    gateway = await make_gateway(webhooks={"throttle_s": 0})
    job_id = await start_job(gateway, receiver.url(), ALL, **TRICKY_INPUT)
    await observe(gateway, job_id, JobState.RUNNING, logs="tab\there ✓\x01")
    await gateway.settle()
    await observe(gateway, job_id, JobState.RUNNING, output=[{"b": 1.0, "1": -0.0}])
    await gateway.settle()
    await observe(gateway, job_id, JobState.COMPLETED, output=[{"b": 1.0, "1": -0.0}, 2e-7])
    await gateway.settle()
    assert len(receiver.received) == 3
    assert js_validate(receiver.received, await secret_of(gateway)) == [True] * 3
    assert js_validate(receiver.received, signing.generate_secret()) == [False] * 3


async def test_each_delivery_row_records_its_outcome(
    gateway: GatewayHarness, receiver: Receiver
) -> None:
    job_id = await start_job(gateway, receiver.url(), ["completed"])
    await observe(gateway, job_id, JobState.COMPLETED, output="x")
    await gateway.settle()
    async with gateway.store.engine.connect() as conn:
        row = (await conn.execute(sa.select(outbox).where(outbox.c.job_id == job_id))).one()
    assert (row.status, row.attempts, row.last_status_code) == ("delivered", 1, 200)
    assert row.lease_owner is None and row.leased_until is None and row.next_attempt_at is None
