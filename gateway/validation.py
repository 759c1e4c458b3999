"""Input validation against a model's schema, before anything is stored or sent.

A route's schema is a Cog-style OpenAPI document (``components.schemas.Input``, with
choices as ``allOf``/``$ref`` to enum schemas), given inline, as a path to a JSON file,
or read once from the provider (a built Cog image serves ``/openapi.json``). ``input`` is
checked with ``jsonschema`` (the draft the schema declares, else 2020-12): a wrong type, a
value out of range or outside its choices, a missing required field, or a field the model
does not declare is refused with a 422 whose detail names each field
(docs/replicate-api.md §5.1; docs/validation.md). Formats are not asserted: a file input
(``format: uri``) may be an URL or a ``data:`` URI alike.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from contracts.errors import ConfigurationError, ContractViolation

if TYPE_CHECKING:
    from jsonschema import ValidationError

__all__ = [
    "PROVIDER_SCHEMA", "InputInvalid", "InputValidator", "Schemas", "load_schema",
    "schema_problem",
]

#: ``openapi_schema = "provider"``: read the schema once from the route's provider.
PROVIDER_SCHEMA = "provider"
Fetch = Callable[[str], Awaitable[dict[str, Any]]]

_MAX_REPORTED = 10


class InputInvalid(ContractViolation):
    """``input`` does not match the model's schema (422); the detail names the fields."""

    title = "Invalid input"


def load_schema(value: dict[str, Any] | str | Path) -> dict[str, Any]:
    """The OpenAPI document given inline or as a path to a JSON file.

    Raises
    ------
    ConfigurationError
        The file is missing or is not a JSON object.
    """
    if isinstance(value, dict):
        return value
    path = Path(value).expanduser()
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"openapi_schema file {path} is unreadable: {exc}") from exc
    if not isinstance(loaded, dict):
        raise ConfigurationError(f"openapi_schema file {path} is not a JSON object")
    return loaded


def schema_problem(source: dict[str, Any] | str | None) -> str | None:
    """Why a route's ``openapi_schema`` (inline or a file) cannot be used, or None; a
    provider's own schema is read at the first create. ``cutover check`` names it, so a
    file that does not load stops the start, not every create on the route."""
    if source is None or source == PROVIDER_SCHEMA:
        return None
    try:
        InputValidator(load_schema(source))
    except ConfigurationError as exc:
        return exc.detail
    return None


class InputValidator:
    """Checks prediction inputs against one OpenAPI document's ``Input`` schema.

    Raises
    ------
    ConfigurationError
        (from the constructor) The document has no ``components.schemas.Input`` object,
        or that schema is not a valid JSON schema.
    """

    def __init__(self, document: dict[str, Any]) -> None:
        components = document.get("components")
        schemas = components.get("schemas") if isinstance(components, dict) else None
        if not isinstance(schemas, dict) or not isinstance(schemas.get("Input"), dict):
            raise ConfigurationError("the model schema has no components.schemas.Input object")
        schemas = copy.deepcopy(schemas)
        declared = schemas["Input"]
        if "properties" in declared and "additionalProperties" not in declared:
            declared["additionalProperties"] = False  # unknown fields are refused
        self._properties = set(declared.get("properties", {}))
        root = {"$ref": "#/components/schemas/Input", "components": {"schemas": schemas}}
        # jsonschema loads only when a route has a schema (it is slow to import: start-up)
        from jsonschema import Draft202012Validator, validators
        from jsonschema.exceptions import SchemaError

        cls = validators.validator_for(declared, default=Draft202012Validator)
        try:
            cls.check_schema(declared)
        except SchemaError as exc:
            raise ConfigurationError(f"the model's Input schema is invalid: {exc.message}") from exc
        self._validator = cls(root)

    def check(self, value: dict[str, Any]) -> None:
        """Return if ``value`` is a valid input, else raise.

        Raises
        ------
        InputInvalid
            Listing up to ten problems as ``input.<field>: <what is wrong>``.
        """
        problems = sorted(
            {self._describe(error, value) for error in self._validator.iter_errors(value)}
        )
        if problems:
            shown = "; ".join(problems[:_MAX_REPORTED])
            more = len(problems) - _MAX_REPORTED
            raise InputInvalid(shown + (f"; and {more} more" if more > 0 else ""))

    def _describe(self, error: ValidationError, value: dict[str, Any]) -> str:
        path = ".".join(str(part) for part in error.absolute_path)
        where = f"input.{path}" if path else "input"
        if error.validator == "required" and not path:
            missing = error.message.split("'")[1] if "'" in error.message else error.message
            return f"input.{missing}: is required"
        if error.validator == "additionalProperties" and not path:
            unknown = sorted(set(value) - self._properties)
            return "; ".join(f"input.{name}: is not an input of this model" for name in unknown)
        return f"{where}: {_message(error)}"


def _message(error: ValidationError) -> str:
    """jsonschema's message, minus the offending value when it is long (no echo of
    large payloads into responses)."""
    text = error.message
    return text if len(text) <= 200 else text[:197] + "..."


class _Route(Protocol):
    @property
    def provider(self) -> str: ...

    @property
    def openapi_schema(self) -> dict[str, Any] | str | None: ...


class Schemas:
    """Each route's schema document and validator, loaded once and kept.

    Parameters
    ----------
    fetch : callable
        ``await fetch(provider_name)``: the provider's own OpenAPI document, for routes
        whose ``openapi_schema`` is ``"provider"``.
    """

    def __init__(self, fetch: Fetch) -> None:
        self._fetch = fetch
        self._documents: dict[tuple[str, Any], dict[str, Any] | None] = {}
        self._validators: dict[tuple[str, Any], InputValidator | None] = {}
        self._inline: list[Any] = []  # keeps inline documents alive, so ids stay theirs
        self._lock = asyncio.Lock()

    async def document(self, route: _Route) -> dict[str, Any] | None:
        """The route's schema document, or None when it declares none.

        Raises
        ------
        ConfigurationError
            The file is unreadable or the provider could not give its schema.
        """
        key = self._key(route)
        if key not in self._documents:
            async with self._lock:
                if key not in self._documents:
                    self._documents[key] = await self._load(route)
        return self._documents[key]

    def _key(self, route: _Route) -> tuple[str, Any]:
        source = route.openapi_schema
        if isinstance(source, dict):
            if not any(kept is source for kept in self._inline[-64:]):
                self._inline.append(source)
            return ("inline", id(source))
        return (route.provider, source)

    async def _load(self, route: _Route) -> dict[str, Any] | None:
        source = route.openapi_schema
        if source is None:
            return None
        if source == PROVIDER_SCHEMA:
            return await self._fetch(route.provider)
        return await asyncio.to_thread(load_schema, source)

    async def check(self, route: _Route, value: dict[str, Any]) -> None:
        """Validate ``value`` as the route's input; routes without a schema accept any.

        Raises
        ------
        InputInvalid
            ``value`` does not match (the detail names the fields).
        ConfigurationError
            The route's schema cannot be loaded or is not a valid model schema.
        """
        key = self._key(route)
        if key not in self._validators:
            document = await self.document(route)
            self._validators[key] = InputValidator(document) if document else None
        validator = self._validators[key]
        if validator is not None:
            validator.check(value)
