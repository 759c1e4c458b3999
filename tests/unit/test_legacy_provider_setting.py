"""``[gateway] legacy_provider`` must name a provider of kind ``replicate``
(docs/cutover-day.md): another kind, or no such provider, stops the configuration."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gateway.config import Settings


def _settings(legacy: str, **providers: Any) -> Settings:
    return Settings(gateway={"legacy_provider": legacy}, providers=providers)


def test_a_replicate_provider_is_accepted() -> None:
    settings = _settings("r8", r8={"kind": "replicate", "token_env": "R8_TOKEN"})
    assert settings.gateway.legacy_provider == "r8"


@pytest.mark.parametrize("providers", [{}, {"r8": {"kind": "fal"}}])
def test_another_kind_or_an_unknown_name_is_refused(providers: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="legacy_provider = 'r8' must name a provider"):
        _settings("r8", **providers)
