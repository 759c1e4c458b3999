"""Parsing and pure decisions, without I/O: headers, version refs, the state machine,
the prediction wire form, routing and canary, and configuration loading."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.errors import ConfigurationError, ContractViolation, NotFound
from contracts.job import TERMINAL_STATES, Job, JobState, can_transition, replicate_status
from contracts.replicate import CreatePrediction, parse_version_ref
from gateway import wire
from gateway.config import RouteSettings, load_settings
from gateway.predictions import MIN_CANCEL_AFTER_S, parse_cancel_after, parse_prefer_wait
from gateway.rollout.router import Caller, Router

VERSION = "5c7d5dc6dd8bf75c1acaa8565735e7986bc5b66206b55cca93cb72c9bf15ccaa"
OTHER_VERSION = "b" * 64
hex64 = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
segment = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)


# --- Prefer: wait (docs/replicate-api.md §3.2) ----------------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),
        ("", None),
        ("respond-async", None),
        ("wait", 60.0),
        ("wait=5", 5.0),
        ("WAIT=5", 5.0),
        (' wait = "7" ', 7.0),
        ("respond-async, wait=3", 3.0),
        ("wait=0", 1.0),
        ("wait=-4", 1.0),
        ("wait=0.2", 1.0),
        ("wait=61", 60.0),
        ("wait=1000", 60.0),
        ("wait=inf", 60.0),
        ("wait=abc", 60.0),
        ("wait=nan", 60.0),
        ("wait=5; foo", 60.0),
    ],
)
def test_parse_prefer_wait(header: str | None, expected: float | None):
    assert parse_prefer_wait(header, 60.0) == expected


@given(st.integers(min_value=-(10**6), max_value=10**6), st.floats(min_value=1, max_value=60))
def test_prefer_wait_n_is_clamped_to_one_and_the_maximum(n: int, max_s: float):
    assert parse_prefer_wait(f"wait={n}", max_s) == min(max(n, 1), max_s)


@given(st.text())
def test_any_prefer_header_is_lenient(header: str):
    found = parse_prefer_wait(header, 30.0)
    assert found is None or (1.0 <= found <= 30.0 and not math.isnan(found))


@given(st.sampled_from(["respond-async", "handling=lenient", "return=minimal", "foo=wait"]))
def test_other_preferences_are_ignored(preference: str):
    assert parse_prefer_wait(preference, 60.0) is None
    assert parse_prefer_wait(f"{preference}, wait=9", 60.0) == 9.0


# --- Cancel-After (docs/replicate-api.md §3.2) ----------------------------------------------------


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        (None, None),
        ("30", 30.0),
        ("30s", 30.0),
        ("5", 5.0),
        ("7.5", 7.5),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("1h30m45s", 5445.0),
        ("2h5s", 7205.0),
        ("1M", 60.0),
        (" 10s ", 10.0),
    ],
)
def test_parse_cancel_after(header: str | None, seconds: float | None):
    assert parse_cancel_after(header) == seconds


@pytest.mark.parametrize(
    "header", ["", "abc", "s", "10x", "1h-5m", "5 m", "m5", "1d", "nan", "inf", "-inf", "1e999"]
)
def test_malformed_cancel_after_is_a_contract_violation(header: str):
    with pytest.raises(ContractViolation, match="Cancel-After"):
        parse_cancel_after(header)


@pytest.mark.parametrize("header", ["0", "4", "4.99", "4s", "0m", "-30"])
def test_cancel_after_under_the_minimum_is_refused(header: str):
    with pytest.raises(ContractViolation, match=f"at least {MIN_CANCEL_AFTER_S:.0f}"):
        parse_cancel_after(header)


@given(st.integers(0, 99), st.integers(0, 59), st.integers(0, 59))
def test_cancel_after_hms_sums_its_parts(h: int, m: int, s: int):
    header = "".join(f"{n}{unit}" for n, unit in ((h, "h"), (m, "m"), (s, "s")) if n)
    total = h * 3600 + m * 60 + s
    if not header or total < MIN_CANCEL_AFTER_S:
        with pytest.raises(ContractViolation):
            parse_cancel_after(header)
    else:
        assert parse_cancel_after(header) == total


@pytest.mark.parametrize("digits", [400, 4301])
def test_cancel_after_too_large_for_a_float_is_refused_not_a_crash(digits: int):
    # int() refuses over 4300 digits and float(int) overflows: like "1e999", not finite.
    for unit in ("h", "m", "s", ""):
        with pytest.raises(ContractViolation, match="not a finite duration"):
            parse_cancel_after("9" * digits + unit, 3600.0)
    assert parse_cancel_after("9" * 300 + "h", 3600.0) == 3600.0  # huge but finite: capped


def test_cancel_after_is_capped_by_max_s():
    assert parse_cancel_after("10h", 1800.0) == 1800.0
    assert parse_cancel_after("10m", 1800.0) == 600.0
    with pytest.raises(ContractViolation):
        parse_cancel_after("2s", 1800.0)


# --- version refs (docs/replicate-api.md §2.1) ----------------------------------------------------


def test_parse_version_ref_accepts_the_three_forms():
    assert parse_version_ref("acme/echo") == ("acme/echo", None)
    assert parse_version_ref(f"acme/echo:{VERSION}") == ("acme/echo", VERSION)
    assert parse_version_ref(VERSION) == (None, VERSION)


@pytest.mark.parametrize(
    "ref",
    [
        "",
        "acme",
        "acme/",
        "/echo",
        "acme/echo/extra",
        "acme/echo:",
        "acme/echo:abc",
        f"acme/echo:{VERSION.upper()}",
        f"acme/echo:{VERSION}0",
        VERSION[:-1],
        VERSION.upper(),
        "-acme/echo",
        "acme /echo",
        f":{VERSION}",
    ],
)
def test_parse_version_ref_rejects_other_shapes(ref: str):
    with pytest.raises(ValueError, match="version"):
        parse_version_ref(ref)


@given(segment, segment, hex64)
def test_parse_version_ref_round_trips(owner: str, name: str, version: str):
    model = f"{owner}/{name}"
    assert parse_version_ref(model) == (model, None)
    assert parse_version_ref(f"{model}:{version}") == (model, version)
    assert parse_version_ref(version) == (None, version)


@given(st.text(max_size=80))
def test_parse_version_ref_never_fails_with_anything_but_value_error(ref: str):
    try:
        model, version = parse_version_ref(ref)
    except ValueError:
        return
    assert model is not None or version is not None
    assert version is None or re.fullmatch(r"[0-9a-f]{64}", version)


# --- the job state machine (docs/lifecycle.md) ---------------------------------------------------

_ORDER = {JobState.CREATING: 0, JobState.QUEUED: 1, JobState.RUNNING: 2}


def _rank(state: JobState) -> int:
    return 3 if state.terminal else _ORDER[state]


@given(st.lists(st.sampled_from(list(JobState)), max_size=30))
def test_transitions_only_move_forward_and_terminal_states_never_change(moves):
    state = JobState.CREATING
    for new in moves:
        allowed = can_transition(state, new)
        if state.terminal:
            assert not allowed
        else:
            assert allowed == (_rank(new) > _rank(state))
        if allowed:
            state = new
    assert _rank(state) >= 0


@given(st.sampled_from(list(JobState)), st.sampled_from(list(JobState)))
def test_no_state_transitions_to_itself_and_active_states_can_always_end(a, b):
    assert not can_transition(a, a)
    if not a.terminal and b.terminal:
        assert can_transition(a, b)
    if a.terminal:
        assert not can_transition(a, b)


def test_replicate_status_never_says_aborted():
    shown = {replicate_status(state) for state in JobState}
    assert shown == {"starting", "processing", "succeeded", "failed", "canceled"}
    assert {replicate_status(s) for s in TERMINAL_STATES} == {"succeeded", "failed", "canceled"}


# --- the prediction wire form (docs/replicate-api.md §4) ------------------------------------------

T0 = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
BASE = "https://gw.example"


def _job(state: JobState = JobState.CREATING, **fields) -> Job:
    values = {
        "id": "abcdefghijklmnopqrstuvwxyz",
        "state": state,
        "model": "acme/echo",
        "version": "hidden",
        "route": "acme/echo",
        "provider": "fake",
        "input": {"prompt": "hi"},
        "created_at": T0,
        **fields,
    }
    return Job(**values)


def test_wire_timestamps_are_rfc3339_utc_with_z_and_microseconds():
    assert wire.timestamp(T0) == "2024-05-06T07:08:09.123456Z"
    assert wire.timestamp(T0.replace(microsecond=0)) == "2024-05-06T07:08:09.000000Z"
    plus_two = T0.astimezone(timezone(timedelta(hours=2)))
    assert wire.timestamp(plus_two) == "2024-05-06T07:08:09.123456Z"
    assert wire.timestamp(datetime(5, 1, 1, tzinfo=UTC)) == "0005-01-01T00:00:00.000000Z"
    assert wire.timestamp(None) is None


def test_wire_urls_are_absolute_on_the_base_url():
    body = wire.prediction(_job(), BASE).wire()
    get_url = f"{BASE}/v1/predictions/abcdefghijklmnopqrstuvwxyz"
    assert body["urls"] == {"get": get_url, "cancel": f"{get_url}/cancel", "web": get_url}
    assert wire.prediction_url(BASE, "x") == f"{BASE}/v1/predictions/x"


@pytest.mark.parametrize(
    ("state", "status"),
    [
        (JobState.CREATING, "starting"),
        (JobState.QUEUED, "starting"),
        (JobState.RUNNING, "processing"),
        (JobState.COMPLETED, "succeeded"),
        (JobState.FAILED, "failed"),
        (JobState.CANCELED, "canceled"),
    ],
)
def test_wire_status_follows_the_state(state: JobState, status: str):
    assert wire.prediction(_job(state), BASE).status == status
    assert wire.prediction(_job(state), BASE, status="starting").status == "starting"


def test_wire_metrics_appear_only_in_terminal_states():
    started, done = T0 + timedelta(seconds=2), T0 + timedelta(seconds=5)
    running = _job(JobState.RUNNING, started_at=started, metrics={"predict_time": 9.0, "n": 1})
    assert wire.prediction(running, BASE).metrics == {"n": 1}
    assert wire.prediction(_job(), BASE).metrics == {}
    finished = _job(JobState.COMPLETED, started_at=started, completed_at=done)
    assert wire.prediction(finished, BASE).metrics == {"predict_time": 3.0, "total_time": 5.0}
    reported = finished.model_copy(update={"metrics": {"predict_time": 1.5}})
    assert wire.prediction(reported, BASE).metrics["predict_time"] == 1.5


def test_wire_leaves_out_unset_optional_keys_and_hides_removed_data():
    body = wire.prediction(_job(), BASE).wire()
    for key in ("deadline", "deployment", "webhook", "webhook_events_filter"):
        assert key not in body
    assert body["logs"] == "" and body["source"] == "api" and body["data_removed"] is False
    removed = _job(JobState.COMPLETED, output="secret", data_removed=True)
    body = wire.prediction(removed, BASE).wire()
    assert (body["input"], body["output"], body["data_removed"]) == (None, None, True)
    deadline = T0 + timedelta(seconds=30)
    body = wire.prediction(_job(deadline=deadline, deployment="acme/prod"), BASE).wire()
    assert (body["deadline"], body["deployment"]) == (wire.timestamp(deadline), "acme/prod")


# --- routing and canary -----------------------------------------------------------------------

ROUTES = [
    RouteSettings(model="acme/echo", version=VERSION, provider="p1"),
    RouteSettings(model="acme/plain", provider="p2"),
    RouteSettings(model="acme/both", version=VERSION, provider="p3"),
    RouteSettings(model="acme/both", provider="p4"),
    RouteSettings(model="acme/app", deployment="team/prod", provider="p5"),
]


def _resolve(router: Router, **target) -> tuple[str, str, str | None, str]:
    routed = router.resolve(CreatePrediction(input={}, **target), "job")
    return routed.model, routed.version, routed.deployment, routed.provider


def test_router_resolves_every_version_form():
    router = Router(ROUTES)
    assert _resolve(router, version_id=VERSION) == ("acme/echo", VERSION, None, "p1")
    assert _resolve(router, model="acme/echo", version_id=VERSION) == (
        "acme/echo",
        VERSION,
        None,
        "p1",
    )
    assert _resolve(router, model="acme/echo") == ("acme/echo", "hidden", None, "p1")
    assert _resolve(router, model="acme/plain") == ("acme/plain", "hidden", None, "p2")


def test_a_versionless_route_serves_any_version_of_its_model():
    router = Router(ROUTES)
    assert _resolve(router, model="acme/plain", version_id=OTHER_VERSION) == (
        "acme/plain",
        OTHER_VERSION,
        None,
        "p2",
    )
    assert _resolve(router, model="acme/both", version_id=OTHER_VERSION)[3] == "p4"
    assert _resolve(router, model="acme/both", version_id=VERSION)[3] == "p3"
    assert _resolve(router, model="acme/both")[3] == "p4"


def test_router_resolves_deployments_by_name_then_by_model():
    router = Router(ROUTES)
    assert _resolve(router, deployment="team/prod") == ("acme/app", "hidden", "team/prod", "p5")
    assert _resolve(router, deployment="acme/plain") == ("acme/plain", "hidden", "acme/plain", "p2")
    assert router.deployment_route("team/prod").model == "acme/app"


@pytest.mark.parametrize(
    "target",
    [
        {"version_id": OTHER_VERSION},
        {"model": "acme/echo", "version_id": OTHER_VERSION},
        {"model": "other/model"},
        {"model": "other/model", "version_id": VERSION},
        {"deployment": "team/none"},
    ],
)
def test_router_refuses_unrouted_targets(target):
    with pytest.raises(NotFound):
        Router(ROUTES).resolve(CreatePrediction(input={}, **target), "job")


def test_model_routes_lists_every_route_of_a_model():
    router = Router(ROUTES)
    assert [r.provider for r in router.model_routes("acme/both")] == ["p3", "p4"]
    assert router.model_routes("other/model") == []


def _canary(percent: float) -> Router:
    route = RouteSettings(
        model="acme/echo", provider="control", candidate="candidate", canary_percent=percent
    )
    return Router([route])


@given(st.text(min_size=1, max_size=40))
def test_canary_zero_and_hundred_percent_are_absolute(job_id: str):
    request = CreatePrediction(model="acme/echo", input={})
    assert _canary(0).resolve(request, job_id).provider == "control"
    assert _canary(100).resolve(request, job_id).provider == "candidate"
    no_candidate = Router([RouteSettings(model="acme/echo", provider="control")])
    assert no_candidate.resolve(request, job_id).provider == "control"


def test_canary_sends_about_its_percentage_and_is_stable_per_caller():
    router, request = _canary(30), CreatePrediction(model="acme/echo", input={})
    callers = [Caller(token=f"r8_{i:05d}") for i in range(10_000)]
    picks = [router.resolve(request, f"job-{i}", c).provider for i, c in enumerate(callers)]
    share = picks.count("candidate") / len(picks)
    assert 0.28 <= share <= 0.32, share
    # a new prediction id does not change a caller's arm
    assert all(router.resolve(request, "other", callers[i]).provider == picks[i]
               for i in range(100))


# --- configuration ----------------------------------------------------------------------------

TOML = """
[gateway]
listen = "0.0.0.0:9000"
public_url = "https://from-file.example/"
api_tokens = ["r8_file"]

[providers.local]
kind = "fake"

[[routes]]
model = "acme/echo"
provider = "local"
"""


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for name in list(os.environ):
        if name.upper().startswith("CUTOVER_"):
            monkeypatch.delenv(name)
    yield monkeypatch


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cutover.toml"
    path.write_text(text)
    return path


def test_load_settings_reads_the_toml_file(tmp_path: Path, clean_env):
    settings = load_settings(_write(tmp_path, TOML))
    assert settings.gateway.listen == "0.0.0.0:9000"
    assert settings.gateway.public_url == "https://from-file.example"  # trailing / dropped
    assert [t.get_secret_value() for t in settings.gateway.api_tokens] == ["r8_file"]
    assert settings.providers["local"].kind == "fake"
    assert [r.model for r in settings.routes] == ["acme/echo"]


def test_environment_overrides_the_file_key_by_key(tmp_path: Path, clean_env):
    clean_env.setenv("CUTOVER_GATEWAY__PUBLIC_URL", "https://from-env.example")
    clean_env.setenv("CUTOVER_GATEWAY__API_TOKENS", '["r8_env1", "r8_env2"]')
    settings = load_settings(_write(tmp_path, TOML))
    assert settings.gateway.public_url == "https://from-env.example"
    assert [t.get_secret_value() for t in settings.gateway.api_tokens] == ["r8_env1", "r8_env2"]
    assert settings.gateway.listen == "0.0.0.0:9000"  # the rest of [gateway] still applies
    assert "r8_env1" not in repr(settings)  # secrets stay secret


def test_load_settings_without_a_file_uses_defaults(clean_env):
    settings = load_settings()
    assert settings.gateway.public_url == "http://127.0.0.1:8080"
    assert settings.routes == [] and settings.providers == {}


def test_a_missing_configuration_file_is_a_clear_error(tmp_path: Path, clean_env):
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigurationError, match=r"nope\.toml does not exist"):
        load_settings(missing)


@pytest.mark.parametrize(
    ("text", "mentions"),
    [
        (TOML + "\n[extra]\nx = 1\n", "extra"),
        (TOML.replace('listen = "0.0.0.0:9000"', "bogus_key = 1"), "bogus_key"),
        (TOML.replace('provider = "local"', 'provider = "ghost"'), "ghost"),
        (TOML + '\n[[routes]]\nmodel = "acme/echo"\nprovider = "local"\n', "two routes"),
        (TOML.replace("acme/echo", "not-a-model"), "not-a-model"),
        (TOML + '\n[providers.cog]\nkind = "cog"\n', "base_url"),
        (TOML.replace('kind = "fake"', 'kind = "baseten"'), "kind"),
        ("[gateway\n", "cutover.toml"),
    ],
)
def test_invalid_configuration_is_a_configuration_error_naming_the_key(
    tmp_path: Path, clean_env, text: str, mentions: str
):
    with pytest.raises(ConfigurationError, match=re.escape(mentions)):
        load_settings(_write(tmp_path, text))


def test_an_invalid_environment_value_is_a_configuration_error(tmp_path: Path, clean_env):
    clean_env.setenv("CUTOVER_GATEWAY__PREFER_WAIT_MAX_S", "600")
    with pytest.raises(ConfigurationError, match="prefer_wait_max_s"):
        load_settings(_write(tmp_path, TOML))
