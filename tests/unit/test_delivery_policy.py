"""gateway.attempt.decide and the delivery settings: pure decisions, clock and rng injected."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from contracts.errors import ContractViolation
from contracts.times import parse_time
from gateway import cli, retry
from gateway.assembly import webhook_signer
from gateway.config import WebhookSettings
from gateway.webhooks import signing
from gateway.webhooks.attempt import Attempt, decide

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
SCHEDULE = retry.Schedule((10.0, 20.0), jitter_ratio=0.0)


def decided(event: str, attempt: int, result: Attempt):  # type: ignore[no-untyped-def]
    return decide(event, attempt, result, NOW, SCHEDULE, random.Random(0))


@pytest.mark.parametrize("event", ["start", "output", "logs", "completed"])
@pytest.mark.parametrize("code", [200, 201, 204, 299])
def test_any_2xx_is_delivered(event: str, code: int) -> None:
    assert decided(event, 1, Attempt(status_code=code)).status == "delivered"


@pytest.mark.parametrize("event", ["start", "completed"])
def test_410_is_dead_and_disables_the_endpoint(event: str) -> None:
    decision = decided(event, 1, Attempt(status_code=410))
    assert (decision.status, decision.disable_endpoint) == ("dead", True)
    assert "410 Gone" in (decision.error or "")


@pytest.mark.parametrize("event", ["start", "completed"])
def test_an_ssrf_refusal_is_dead_at_once(event: str) -> None:
    decision = decided(event, 1, Attempt(error="resolves to 10.0.0.1 (private)", refused=True))
    assert decision.status == "dead" and not decision.disable_endpoint
    assert decision.error == "refused by the SSRF guard: resolves to 10.0.0.1 (private)"


@pytest.mark.parametrize(
    ("result", "error"),
    [
        (Attempt(status_code=301), "HTTP 301 (redirects are not followed)"),
        (Attempt(status_code=404), "HTTP 404"),
        (Attempt(status_code=413), "HTTP 413"),
        (Attempt(status_code=500), "HTTP 500"),
        (Attempt(error="no response within 10.0 s"), "no response within 10.0 s"),
        (Attempt(error="connection failed: Connection refused"), "connection failed"),
    ],
)
def test_completed_failures_follow_the_schedule_then_die(result: Attempt, error: str) -> None:
    first = decided("completed", 1, result)
    assert (first.status, first.next_attempt_at) == ("pending", NOW + timedelta(seconds=10))
    assert first.error is not None and first.error.startswith(error)
    second = decided("completed", 2, result)
    assert second.next_attempt_at == NOW + timedelta(seconds=20)
    last = decided("completed", 3, result)
    assert (last.status, last.next_attempt_at) == ("dead", None)
    assert last.error is not None and last.error.endswith("gave up after 3 attempts")


@pytest.mark.parametrize("event", ["start", "output", "logs"])
@pytest.mark.parametrize("code", [301, 400, 413, 500, 503])
def test_non_terminal_failures_are_dropped_after_one_attempt(event: str, code: int) -> None:
    decision = decided(event, 1, Attempt(status_code=code))
    assert (decision.status, decision.next_attempt_at) == ("dropped", None)


def test_retry_after_is_honoured_up_to_the_cap() -> None:
    schedule = retry.Schedule((1.0,), jitter_ratio=0.0, max_retry_after_s=300.0)
    rng = random.Random(0)
    for header, wait_s in (("120", 120), ("100000", 300), ("soon", 1)):
        result = Attempt(status_code=503, retry_after=header)
        at = decide("completed", 1, result, NOW, schedule, rng).next_attempt_at
        assert at == NOW + timedelta(seconds=wait_s), header
    date = "Fri, 01 May 2026 12:02:00 GMT"
    at = decide("completed", 1, Attempt(503, date), NOW, schedule, rng).next_attempt_at
    assert at == NOW + timedelta(seconds=120)


def test_jitter_stays_within_the_ratio() -> None:
    schedule = retry.Schedule((100.0,), jitter_ratio=0.1)
    rng = random.Random(7)
    for _ in range(200):
        at = decide("completed", 1, Attempt(status_code=500), NOW, schedule, rng).next_attempt_at
        assert at is not None and 90 <= (at - NOW).total_seconds() <= 110


def test_rotation_settings_go_together_and_need_a_zone() -> None:
    old = signing.generate_secret()
    with pytest.raises(ValueError, match="go together"):
        WebhookSettings(previous_signing_secret=old)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="time zone"):
        WebhookSettings(
            previous_signing_secret=old,  # type: ignore[arg-type]
            previous_valid_until=datetime(2030, 1, 1),
        )
    with pytest.raises(ValueError, match="finite"):
        WebhookSettings(retry_delays_s=[1.0, -1.0])


def test_signer_for_signs_twice_during_the_overlap_only() -> None:
    old, new = signing.generate_secret(), signing.generate_secret()
    settings = WebhookSettings(
        previous_signing_secret=old,  # type: ignore[arg-type]
        previous_valid_until=NOW + timedelta(minutes=5),
    )
    signer = webhook_signer(new, settings)
    assert len(signer.sign("msg_1", 1, b"{}", now=NOW).split(" ")) == 2
    assert len(signer.sign("msg_1", 1, b"{}", now=NOW + timedelta(minutes=5)).split(" ")) == 1
    assert len(webhook_signer(new, WebhookSettings()).sign("m", 1, b"{}", now=NOW).split()) == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-05-01T12:00:00Z", NOW),
        ("2026-05-01T14:00:00+02:00", NOW),
        ("2026-05-01T12:00:00", NOW),  # no zone: UTC
        ("2026-05-01", NOW.replace(hour=0)),
    ],
)
def test_parse_time(text: str, expected: datetime) -> None:
    assert parse_time(text) == expected


def test_parse_time_names_the_bad_argument() -> None:
    with pytest.raises(ContractViolation, match="--since must be an ISO 8601 time"):
        parse_time("yesterday", "--since")


@pytest.mark.parametrize("text", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_parse_time_out_of_range_in_utc_is_a_contract_violation(text: str) -> None:
    with pytest.raises(ContractViolation, match=r"--until .* is out of range"):
        parse_time(text, "--until")


def test_any_cutover_error_is_one_line_and_status_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(path: object) -> None:
        raise ContractViolation("not like that")

    monkeypatch.setattr(cli, "load_settings", refuse)
    assert cli.main(["check"]) == 2
    assert capsys.readouterr().err == "cutover: not like that\n"


def test_replay_command_needs_exactly_one_target(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["webhooks", "replay"], ["webhooks", "replay", "7", "--since", "2026-01-01"]):
        with pytest.raises(SystemExit) as exited:
            cli.main(argv)
        assert exited.value.code == 2
        assert "an ID or --since" in capsys.readouterr().err
