"""``[operator_webhook]`` mistakes, each named in one line by ``check`` or ``serve``
(docs/webhooks.md, "Operator webhook"), and the events' bodies."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from contracts.errors import ConfigurationError
from gateway import cli
from gateway.config import load_settings
from gateway.rollout import announce
from gateway.rollout.spec import AuditEntry
from gateway.webhooks.signing import generate_secret

ENV = "CUTOVER_TEST_OPS_HOOK_SECRET"


def _config(tmp_path: Path, hook: str) -> Path:
    path = tmp_path / "cutover.toml"
    path.write_text(
        '[gateway]\napi_tokens = ["r8_test"]\n'
        f'database_url = "sqlite+aiosqlite:///{tmp_path}/cutover.db"\n'
        f'storage_url = "file://{tmp_path}/assets"\n'
        '[providers.fake]\nkind = "fake"\n[[routes]]\nmodel = "acme/echo"\nprovider = "fake"\n'
        f"[operator_webhook]\n{hook}\n"
    )
    return path


@pytest.mark.parametrize(("hook", "says"), [
    (f'url = "ftp://ops.example/hook"\nsecret_env = "{ENV}"',
     "operator_webhook.url: url must be an absolute http(s) URL, got 'ftp://ops.example/hook'"),
    ('url = "https://ops.example/hook"\nsecret_env = "not a name"',
     "operator_webhook.secret_env: secret_env names an environment variable"),
    (f'url = "https://ops.example/hook"\nsecret_env = "{ENV}"\nevents = ["rollback"]',
     "operator_webhook.events: unknown event type(s) 'rollback'; known: route.canary_changed"),
    ('url = "https://ops.example/hook"', "operator_webhook.secret_env: Field required"),
])
def test_a_malformed_operator_webhook_is_refused_naming_the_setting(
    hook: str, says: str, tmp_path: Path,
) -> None:
    with pytest.raises(ConfigurationError) as raised:
        load_settings(_config(tmp_path, hook))
    assert any(says in line for line in raised.value.detail.splitlines()), raised.value.detail


@pytest.mark.parametrize(("value", "says"), [
    (None, f"[operator_webhook] secret_env = '{ENV}': ${ENV} is not set"),
    ("hunter2", f"[operator_webhook] secret_env = '{ENV}': ${ENV}: webhook secret must "
                "start with 'whsec_'"),
])
def test_check_and_serve_name_a_missing_or_malformed_secret(
    value: str | None, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if value is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, value)
    config = str(_config(tmp_path, f'url = "https://ops.example/hook"\nsecret_env = "{ENV}"'))
    assert cli.main(["check", "--config", config]) == 1
    assert f"cutover: {says}" in capsys.readouterr().err.splitlines()[0]
    assert cli.main(["serve", "--config", config]) == 2  # refused before it listens
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err
    assert not (tmp_path / "cutover.db").exists()  # nothing was started


def test_check_with_a_good_secret_prints_the_operator_webhook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(ENV, generate_secret())
    config = _config(tmp_path, f'url = "https://ops.example/hook"\nsecret_env = "{ENV}"\n'
                     'events = ["route.rolled_back", "route.promoted"]')
    cli.main(["check", "--config", str(config)])
    out = capsys.readouterr()
    assert "operator_webhook" not in out.err
    assert ("operator    webhook https://ops.example/hook: route.rolled_back, route.promoted"
            in out.out.splitlines())


def test_every_audit_action_has_an_event_type_and_the_body_names_what_changed() -> None:
    at = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    entry = AuditEntry(id=7, route="acme/echo", at=at, who="guard", action="rollback",
                       before={"canary_percent": 50, "provider": "a"},
                       after={"canary_percent": 0, "provider": "a"}, reason="error rate",
                       evidence={"reason_class": "errors"})
    event = announce.body(entry)
    assert event["type"] == "route.rolled_back"
    assert event["timestamp"] == "2026-12-02T12:00:00+00:00"
    assert event["data"]["changed"] == ["canary_percent"]
    assert (event["data"]["audit_id"], event["data"]["actor"]) == (7, "guard")
    assert announce.event_type("update") == "route.changed"
    assert len(set(announce.EVENT_TYPES)) == len(announce.EVENT_TYPES)
