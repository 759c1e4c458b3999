"""The lease owner of a gateway process (docs/lifecycle.md, "Lease owners"): it fits the
store's 64-character ``lease_owner`` columns, stays unique between Kubernetes pods whose
names differ only at their end and that run as pid 1, and still names the pod."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta

import pytest

from gateway.store import applying
from gateway.store.lease import OWNER_CHARS, owner_id, process_owner

DEPLOYMENT = "payments-inference-gateway-canary-eu-west-1abc"  # 46 characters
PODS = [f"{DEPLOYMENT}-5c9b7d8f64-{suffix}" for suffix in ("x2k9p", "x2k9q", "b7r4m")]


def test_the_store_keeps_64_characters() -> None:
    assert OWNER_CHARS == 64


@pytest.mark.parametrize("pid", [1, 4_194_304, 4_294_967_295])
def test_pods_as_pid_1_get_distinct_owners_that_fit_and_name_their_pod(pid: int) -> None:
    owners = [owner_id(pod, pid, "9e0c44d1") for pod in PODS]  # even with one nonce
    assert all(len(pod) == 63 for pod in PODS)
    assert all(len(owner) <= OWNER_CHARS for owner in owners)
    assert len(set(owners)) == len(owners)
    for pod, owner in zip(PODS, owners, strict=True):
        assert owner.startswith("payments-inference-")  # readable: the deployment
        assert pod[-17:] in owner  # the replica set and pod hashes: which pod
        assert owner.endswith(f":{pid}:9e0c44d1")


def test_a_short_host_name_is_kept_whole() -> None:
    assert owner_id("web-1", 4711, "9e0c44d1") == "web-1:4711:9e0c44d1"


def test_two_gateways_on_one_host_and_pid_get_distinct_owners(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "x" * 64)  # Linux's longest
    owners = {process_owner() for _ in range(20)}
    assert len(owners) == 20
    assert all(len(owner) <= OWNER_CHARS for owner in owners)


def test_a_process_on_a_host_named_apply_holds_no_apply_lease() -> None:
    """An apply's lease owner cannot be a process's: a job claimed by the gateway of a host
    named ``apply`` is not taken for one whose result is being applied (provider events
    would wait for it)."""
    now = datetime(2026, 12, 1, tzinfo=UTC)
    later = now + timedelta(seconds=30)
    assert applying.held_until(owner_id("apply", 1, "9e0c44d1"), later, now) is None
    assert applying.held_until(applying.new_token(), later, now) == later
