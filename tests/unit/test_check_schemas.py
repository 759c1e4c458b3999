"""``cutover check`` names every route whose model schema is unknown, and what breaks
without it (docs/validation.md); routes whose schema is given or whose provider can tell
it (Cog, Replicate, the ``openai`` adapter's own) are not named."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway import cli

CONFIG = """
[gateway]
listen = "127.0.0.1:0"
api_tokens = ["r8_test"]
database_url = "sqlite+aiosqlite:///{tmp}/cutover.db"
storage_url = "file://{tmp}/assets"

[providers.cog]
kind = "cog"
base_url = "http://127.0.0.1:5000"

[providers.fal]
kind = "fal"

[providers.llm]
kind = "openai"
base_url = "http://127.0.0.1:8000/v1"

[[routes]]
model = "acme/echo"
provider = "cog"

[[routes]]
model = "acme/sdxl"
provider = "fal"

[[routes]]
model = "acme/flux"
provider = "fal"
openapi_schema = {{ components = {{ schemas = {{ Input = {{ type = "object" }} }} }} }}

[[routes]]
model = "acme/llm"
provider = "llm"
"""


def test_check_names_each_route_whose_schema_is_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAL_KEY", "test-key")  # a test value, not a credential
    path = tmp_path / "cutover.toml"
    path.write_text(CONFIG.format(tmp=tmp_path))
    assert cli.main(["check", "--config", str(path)]) == 0  # a warning, not a refusal
    warnings = [line for line in capsys.readouterr().err.splitlines() if "model schema" in line]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("cutover: warning: route acme/sdxl: no model schema: "
                                  "provider kind 'fal' cannot tell it")
    assert "inputs are not validated" in warnings[0]
    assert "outputs are not checked" in warnings[0]
    assert "set openapi_schema" in warnings[0]
