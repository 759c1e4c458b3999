"""Where a route's schema comes from when it gives none: its provider, asked within
ASK_TIMEOUT_S, again after ASK_AGAIN_S when it could not tell (gateway/validation.py,
docs/translation.md "Where a route's schema comes from")."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from adapters.openai_schema import model_schema
from contracts.errors import ConfigurationError
from gateway import validation
from gateway.translation.conformance import conform, output_schema
from gateway.validation import InputValidator, Schemas
from tests.support.fixtures import ECHO_OPENAPI_SCHEMA


@dataclass(frozen=True)
class Route:
    provider: str = "up"
    model: str = "acme/echo"
    version: str | None = None
    target: str | None = None
    openapi_schema: Any = None
    strict_inputs: bool = False


async def test_a_provider_that_cannot_tell_is_asked_again_later() -> None:
    asked: list[tuple[str, str]] = []
    answers: list[Any] = [ConfigurationError("no schema yet"), ECHO_OPENAPI_SCHEMA]

    async def fetch(provider: str, target: str) -> dict[str, Any]:
        asked.append((provider, target))
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]

    schemas = Schemas(fetch)
    route = Route(target="acme/upstream:abc")
    assert await schemas.document(route) is None
    assert await schemas.document(route) is None  # not asked again at once
    assert asked == [("up", "acme/upstream:abc")]
    schemas._unknown_until = {k: 0.0 for k in schemas._unknown_until}  # ASK_AGAIN_S later
    assert await schemas.document(route) == ECHO_OPENAPI_SCHEMA
    assert len(asked) == 2
    checked = await schemas.check(route, {"prompt": "x", "stream": True})
    assert checked.input == {"prompt": "x"}


async def test_held_says_whether_a_document_answers_without_asking() -> None:
    """``Schemas.held`` (the webhook fast path's question, gateway/intake.py) asks
    nothing itself: False before the first load and once an unknown schema is due to be
    asked again, True while the document (or its absence) is what this process holds."""
    asked: list[str] = []
    answers: list[Any] = [ConfigurationError("no schema yet"), ECHO_OPENAPI_SCHEMA]

    async def fetch(provider: str, target: str) -> dict[str, Any]:
        asked.append(target)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]

    schemas = Schemas(fetch)
    route = Route(target="acme/upstream:abc")
    assert not schemas.held(route) and asked == []
    assert await schemas.document(route) is None
    assert schemas.held(route)  # unknown, not to be asked again yet
    schemas._unknown_until = {k: 0.0 for k in schemas._unknown_until}  # ASK_AGAIN_S later
    assert not schemas.held(route) and len(asked) == 1
    assert await schemas.document(route) == ECHO_OPENAPI_SCHEMA
    assert schemas.held(route) and len(asked) == 2


async def test_a_provider_that_does_not_answer_in_time_leaves_it_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    never = asyncio.Event()

    async def fetch(provider: str, target: str) -> dict[str, Any]:
        await never.wait()
        return {}

    monkeypatch.setattr(validation, "ASK_TIMEOUT_S", 0.01)
    schemas = Schemas(fetch)
    assert await schemas.document(Route(version="v" * 64)) is None
    assert (await schemas.check(Route(version="v" * 64), {"any": 1})).input == {"any": 1}


def test_the_openai_language_model_schema_is_an_iterator_of_strings() -> None:
    document = model_schema("chat")
    output = document["components"]["schemas"]["Output"]
    assert output["x-cog-array-type"] == "iterator"
    assert output["x-cog-array-display"] == "concatenate"
    assert conform(output_schema(document), ["Hel", "lo"]) == ["Hel", "lo"]
    validator = InputValidator(document)
    assert validator.check({"prompt": "hi", "max_length": 9, "stop": "a,b"}).dropped == (
        "max_length",)
    images = model_schema("images")["components"]["schemas"]["Output"]
    assert images["items"] == {"type": "string", "format": "uri"}
