"""``[[tenants]]`` mistakes are refused when the configuration loads, by ``check`` and
``serve`` alike, each named in one line (docs/security.md, README "[[tenants]]")."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts.errors import ConfigurationError
from gateway import cli
from gateway.config import load_settings, tenants

BASE = """
[gateway]
api_tokens = ["r8_default"]
database_url = "sqlite+aiosqlite:///{tmp}/cutover.db"
storage_url = "file://{tmp}/assets"

[providers.fake]
kind = "fake"

[[routes]]
model = "acme/echo"
provider = "fake"
{route}
"""


def _config(tmp_path: Path, tenants_toml: str, route: str = "") -> Path:
    path = tmp_path / "cutover.toml"
    path.write_text(BASE.format(tmp=tmp_path, route=route) + tenants_toml)
    return path


def _tenant(name: str, *tokens: str) -> str:
    listed = ", ".join(f'"{t}"' for t in tokens)
    return f'\n[[tenants]]\nname = "{name}"\napi_tokens = [{listed}]\n'


@pytest.mark.parametrize(("toml", "route", "says"), [
    (_tenant("a", "r8_a") + _tenant("a", "r8_b"), "", "two [[tenants]] entries are named 'a'"),
    (_tenant("a", "r8_a") + _tenant("b", "r8_a"), "",
     "one API token is given to tenants a and b"),
    (_tenant("a", "r8_default"), "", "one API token is given to tenants default and a"),
    (_tenant("default", "r8_a"), "", "'default' is the tenant of [gateway] api_tokens"),
    (_tenant("Billing Team", "r8_a"), "", "the tenant name 'Billing Team' must be 1 to 32"),
    (_tenant("a" * 33, "r8_a"), "", f"the tenant name '{'a' * 32}'... must be 1 to 32"),
    (_tenant("a", "r8 a"), "", "a gateway API token is empty or has a space"),
    (_tenant("a", "r8_a"), 'tenants = ["b"]', "route acme/echo names unknown tenant 'b'"),
    (_tenant("a", "r8_a") + 'webhook_signing_secret = "nope"\n', "", "whsec_"),
])
def test_a_tenant_mistake_is_refused_at_load_and_by_check(
    toml: str, route: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    path = _config(tmp_path, toml, route)
    with pytest.raises(ConfigurationError) as raised:
        load_settings(path)
    assert says in raised.value.detail
    assert cli.main(["check", "--config", str(path)]) != 0
    assert says in capsys.readouterr().err


def test_tenant_tokens_are_named_by_their_tenant(tmp_path: Path) -> None:
    path = _config(tmp_path, _tenant("a", "r8_a", "r8_a2"), 'tenants = ["a"]')
    settings = load_settings(path)
    assert tenants.token_tenants(settings) == {
        "token-1": "default", "a/token-1": "a", "a/token-2": "a"}
    assert cli.main(["check", "--config", str(path)]) == 0
