"""Issue 6 faults 7, 10 and 11: the event loop is never blocked by heavy work, and what
apps see while a prediction runs has the form it will have at the end.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from contracts.job import JobState
from contracts.snapshot import ProviderSnapshot, SubmitRequest
from gateway import wire
from tests.support.faults import ThreadLog, engine_of, observe_large
from tests.support.gateway import VERSION, GatewayHarness
from tests.support.outbox import observe, start_job
from tests.support.receiver import Receiver

MiB = 1024 * 1024


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with Receiver() as rec:
        yield rec


def data_uri(payload: bytes, content_type: str = "application/octet-stream") -> str:
    return f"data:{content_type};base64," + base64.b64encode(payload).decode()


def _size(value: Any) -> int:
    return len(value) if isinstance(value, bytes | bytearray | str) else 0


# --- fault 7 ----------------------------------------------------------------------------


async def test_fault_07_outputs_are_decoded_and_hashed_off_the_event_loop(
    gateway: GatewayHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads = ThreadLog()
    big = lambda *a, **k: bool(a) and _size(a[0]) > MiB  # noqa: E731
    monkeypatch.setattr(base64, "b64decode", threads.wrap("b64decode", base64.b64decode, big))
    monkeypatch.setattr(hashlib, "sha256", threads.wrap("sha256", hashlib.sha256, big))
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    await gateway.settle()
    blob = data_uri(b"\x89PNG" + b"\x00" * (3 * MiB))
    await observe_large(gateway, prediction["id"], JobState.COMPLETED, output=blob)
    done = await gateway.wait_for(prediction["id"], "succeeded")
    assert done["output"].startswith("https://gateway.test/assets/")
    assert {"b64decode", "sha256"} <= set(threads.calls)
    assert threads.on_loop_thread == []


async def test_fault_07_large_provider_webhooks_are_parsed_off_the_event_loop(
    gateway: GatewayHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads = ThreadLog()
    parse = threads.wrap("parse_webhook", gateway.fake.parse_webhook, lambda b: len(b) > MiB)
    monkeypatch.setattr(gateway.fake, "parse_webhook", parse)
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    await gateway.settle()
    text = "x" * (2 * MiB)
    await observe_large(gateway, prediction["id"], JobState.COMPLETED, output=text)
    await gateway.wait_for(prediction["id"], "succeeded")
    assert threads.calls == ["parse_webhook"]
    assert threads.on_loop_thread == []


async def test_fault_07_the_prediction_is_serialised_outside_the_write_transaction(
    gateway: GatewayHarness, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The webhook payload of a large prediction is built before the transaction that
    stores it begins (on SQLite that transaction holds the only connection)."""
    open_transactions = {"n": 0}
    sync = engine_of(gateway).sync_engine

    def began(conn: Any) -> None:
        open_transactions["n"] += 1

    def ended(conn: Any) -> None:
        open_transactions["n"] -= 1

    inside: list[int] = []
    compact = wire.compact_json

    def watched(value: Any) -> bytes:
        body = compact(value)
        if len(body) > MiB:
            inside.append(open_transactions["n"])
        return body

    job_id = await start_job(gateway, receiver.url(), ["completed"])
    monkeypatch.setattr(wire, "compact_json", watched)
    event.listen(sync, "begin", began)
    event.listen(sync, "commit", ended)
    event.listen(sync, "rollback", ended)
    try:
        await observe_large(gateway, job_id, JobState.COMPLETED, output="y" * (2 * MiB))
    finally:
        for name, fn in (("begin", began), ("commit", ended), ("rollback", ended)):
            event.remove(sync, name, fn)
    assert inside and set(inside) == {0}, inside


async def test_fault_07_the_assets_handler_checks_files_off_the_event_loop(
    gateway: GatewayHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    prediction = await gateway.create({"version": VERSION, "input": {"prompt": "x"}})
    await gateway.settle()
    await observe(gateway, prediction["id"], JobState.COMPLETED, output=data_uri(b"file"))
    done = await gateway.wait_for(prediction["id"], "succeeded")
    threads = ThreadLog()
    monkeypatch.setattr(Path, "is_file", threads.wrap("is_file", Path.is_file, lambda p: True))
    response = await gateway.client.get(done["output"].removeprefix("https://gateway.test"))
    assert response.status == 200 and await response.read() == b"file"
    assert "is_file" in threads.calls
    assert threads.on_loop_thread == []


# --- fault 10 ---------------------------------------------------------------------------


async def test_fault_10_a_wait_answer_rewritten_to_starting_carries_no_output_or_logs(
    gateway: GatewayHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Python client treats output in a ``starting`` answer as delivered and skips
    it later; a rewritten status must be consistent as a whole."""
    submit = gateway.fake.submit

    async def streaming(request: SubmitRequest) -> ProviderSnapshot:
        await submit(request)
        return gateway.fake.set_state(
            request.job_id, JobState.RUNNING, output=["first"], logs="one\n"
        )

    monkeypatch.setattr(gateway.fake, "submit", streaming)
    held = asyncio.create_task(
        gateway.client.post(
            "/v1/predictions",
            json={"version": VERSION, "input": {"prompt": "x"}},
            headers={**gateway.headers, "Prefer": "wait=1"},
        )
    )
    while not held.done():
        await gateway.settle()
        await asyncio.sleep(0.01)
    response = await held
    body = await response.json()
    assert response.status == 201
    assert body["status"] == "starting"
    assert (body["output"], body["logs"]) == (None, "")
    await gateway.settle()  # the job may still be unsubmitted on a busy machine
    assert (await gateway.get(body["id"]))["output"] == ["first"]


# --- fault 11 ---------------------------------------------------------------------------


def _has_data_uri(value: Any) -> bool:
    return "data:" in json.dumps(value)


async def test_fault_11_interim_output_has_the_final_form(
    make_gateway: Any, receiver: Receiver
) -> None:
    """While running, neither GET nor ``output`` webhooks show the provider's ``data:``
    URIs, nor a list where the final output is one file."""
    gateway = await make_gateway(webhooks={"throttle_s": 0})
    job_id = await start_job(gateway, receiver.url(), ["output", "completed"])
    blob = data_uri(b"one file", "text/plain")
    await observe(gateway, job_id, JobState.RUNNING, output=[blob])
    interim = [(await gateway.get(job_id))["output"]]
    await gateway.settle()
    await observe(gateway, job_id, JobState.COMPLETED, output=blob)
    final = (await gateway.wait_for(job_id, "succeeded"))["output"]
    assert isinstance(final, str) and final.startswith("https://gateway.test/assets/")
    sent = receiver.received
    interim += [r.payload["output"] for r in sent if r.payload["status"] != "succeeded"]
    for seen in interim:
        assert not _has_data_uri(seen), seen
        assert seen is None or type(seen) is type(final), seen


async def test_fault_11_streamed_files_arrive_as_owned_urls_or_not_at_all(
    make_gateway: Any, receiver: Receiver
) -> None:
    gateway = await make_gateway(webhooks={"throttle_s": 0})
    job_id = await start_job(gateway, receiver.url(), ["output", "completed"])
    frames = [data_uri(f"frame {n}".encode(), "text/plain") for n in range(3)]
    for n in range(1, 4):
        await observe(gateway, job_id, JobState.RUNNING, output=frames[:n])
        shown = (await gateway.get(job_id))["output"]
        assert not _has_data_uri(shown), shown
    await gateway.settle()
    await observe(gateway, job_id, JobState.COMPLETED, output=frames)
    final = (await gateway.wait_for(job_id, "succeeded"))["output"]
    await gateway.settle()
    for received in receiver.received:
        output = received.payload["output"]
        assert not _has_data_uri(output), output
        assert output is None or output == final[: len(output)], output
