"""Output conformance: a provider's output checked against the model's ``Output`` schema
before ``succeeded`` is recorded (docs/translation.md, "Schemas, inputs and output
conformance").

:func:`conform` is pure: it takes the route's ``Output`` schema (from its OpenAPI
document, :func:`output_schema`) and an output, and returns the output in the declared
shape or raises :class:`OutputMismatch` with a one-line message naming the mismatch:

- no output (``None``) where the schema does not allow ``null``: "the provider returned
  no output";
- an item of the wrong type (a dict in an array of strings), a list where one string
  (one URI) is declared, a string where a list is, an object where a string is;
- shape fixes that lose nothing: a list of strings where ``type: string`` is declared
  (streamed text) is joined into one string; a one-element list where one URI
  (``format: uri``) is declared is that URI.

A schema without a type (Cog's ``{"title": "Output"}`` for ``-> Any``), or no schema at
all, accepts any output. Formats are not asserted (a URI may be a ``data:`` URI).
:class:`OutputContract` finds a job's route schema; the finalizer calls it on the
(mapped) provider output, before files are copied.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from contracts.errors import CutoverError
from gateway.rollout.spec import route_key

__all__ = ["OutputContract", "OutputMismatch", "conform", "interim", "output_schema"]

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}
_NAMES = {str: "a string", bool: "a boolean", int: "an integer", float: "a number",
          dict: "an object", list: "a list", type(None): "null"}
_MAX_DEPTH = 32


class OutputMismatch(CutoverError):
    """The provider's output does not have the model's declared shape: the prediction
    ends ``failed`` with this one-line message (the raw output is kept for operators)."""

    title = "Output does not match the model's schema"


def output_schema(document: dict[str, Any] | None) -> dict[str, Any] | None:
    """``components.schemas.Output`` of an OpenAPI document with its ``$ref`` (and
    single-member ``allOf``) resolved at every level, or None when there is none."""
    if not isinstance(document, dict):
        return None
    components = document.get("components")
    schemas = components.get("schemas") if isinstance(components, dict) else None
    if not isinstance(schemas, dict) or not isinstance(schemas.get("Output"), dict):
        return None
    return _resolve(schemas["Output"], schemas, 0)


def _resolve(schema: Any, schemas: dict[str, Any], depth: int) -> Any:
    if not isinstance(schema, dict) or depth > _MAX_DEPTH:
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
        target = schemas.get(ref.rsplit("/", 1)[1], {})
        merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return _resolve(merged, schemas, depth + 1)
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], dict):
        merged = {**_resolve(all_of[0], schemas, depth + 1),
                  **{k: v for k, v in schema.items() if k != "allOf"}}
        return _resolve(merged, schemas, depth + 1)
    out = dict(schema)
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = _resolve(out[key], schemas, depth + 1)
    for key in ("anyOf", "oneOf"):
        if isinstance(out.get(key), list):
            out[key] = [_resolve(s, schemas, depth + 1) for s in out[key]]
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: _resolve(v, schemas, depth + 1)
                             for k, v in out["properties"].items()}
    return out


def conform(schema: dict[str, Any] | None, output: Any) -> Any:
    """``output`` in the shape ``schema`` (a resolved ``Output`` schema) declares.

    Raises
    ------
    OutputMismatch
        ``output`` is missing where required, or of another type than declared (the
        message names where: ``output``, ``output[2]``, ``output.seed``).
    """
    if not schema:
        return output
    if output is None:
        if _allows_null(schema):
            return None
        raise OutputMismatch(
            f"the provider returned no output (the model declares {_declared(schema)})"
        )
    return _conform(schema, output, "output", top=True)


def interim(schema: dict[str, Any] | None, output: Any) -> Any:
    """An interim (not yet final) output as apps may see it: streamed text chunks of a
    ``type: string`` output are withheld (None) until :func:`conform` joins them, so a
    stream never shows chunks the final string replaces; anything else unchanged."""
    if schema and _types(schema) == {"string"} and isinstance(output, list):
        return None
    return output


def _conform(schema: dict[str, Any], value: Any, where: str, *, top: bool = False) -> Any:
    if value is None:
        if _allows_null(schema) or not _types(schema):
            return None
        raise OutputMismatch(f"{where} is null where the model declares {_declared(schema)}")
    options = _options(schema)
    if options is not None:
        return _first_fitting(options, value, where, schema)
    types = _types(schema)
    if not types:
        return value
    if top and types == {"string"} and isinstance(value, list):
        return _as_string(schema, value)
    if not any(_is(value, t) for t in types):
        raise OutputMismatch(
            f"{where} is {_kind(value)} where the model declares {_declared(schema)}"
        )
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_conform(schema["items"], item, f"{where}[{n}]") for n, item in enumerate(value)]
    if isinstance(value, dict):
        return _conform_object(schema, value, where)
    return value


def _as_string(schema: dict[str, Any], value: list[Any]) -> str:
    """A list where one string is declared: streamed text is joined; one URI stays one."""
    wrong = next((n for n, item in enumerate(value) if not isinstance(item, str)), None)
    if wrong is not None:
        raise OutputMismatch(
            f"output[{wrong}] is {_kind(value[wrong])} where the model declares "
            f"{_declared(schema)}"
        )
    if schema.get("format") != "uri":
        return "".join(value)
    if len(value) == 1:
        return str(value[0])
    raise OutputMismatch(
        f"the provider returned a list of {len(value)} files where the model declares one URI"
    )


def _conform_object(schema: dict[str, Any], value: dict[str, Any], where: str) -> Any:
    found, wanted = schema.get("properties"), schema.get("required")
    properties: dict[str, Any] = found if isinstance(found, dict) else {}
    required: list[Any] = wanted if isinstance(wanted, list) else []
    missing = [name for name in required if name not in value]
    if missing:
        raise OutputMismatch(f"{where}.{missing[0]} is missing (the model declares it required)")
    return {
        k: _conform(properties[k], v, f"{where}.{k}") if isinstance(properties.get(k), dict)
        else v
        for k, v in value.items()
    }


def _first_fitting(
    options: list[dict[str, Any]], value: Any, where: str, schema: dict[str, Any]
) -> Any:
    for option in options:
        try:
            return _conform(option, value, where)
        except OutputMismatch:
            continue
    raise OutputMismatch(f"{where} is {_kind(value)} where the model declares {_declared(schema)}")


def _options(schema: dict[str, Any]) -> list[dict[str, Any]] | None:
    for key in ("anyOf", "oneOf"):
        found = schema.get(key)
        if isinstance(found, list) and found:
            return [s for s in found if isinstance(s, dict)]
    return None


def _types(schema: dict[str, Any]) -> set[str]:
    declared = schema.get("type")
    names: Iterable[Any] = declared if isinstance(declared, list) else [declared]
    return {name for name in names if name in _TYPES}


def _allows_null(schema: dict[str, Any]) -> bool:
    declared = schema.get("type")
    if schema.get("nullable") is True or declared == "null":
        return True
    if isinstance(declared, list) and "null" in declared:
        return True
    options = _options(schema)
    if options is not None:
        return any(_allows_null(option) for option in options)
    return not _types(schema)  # no type (Cog's ``-> Any``): anything, null too


def _is(value: Any, type_name: str) -> bool:
    if isinstance(value, bool):
        return type_name == "boolean"
    return isinstance(value, _TYPES[type_name])


def _kind(value: Any) -> str:
    return _NAMES.get(type(value), type(value).__name__)


def _declared(schema: dict[str, Any]) -> str:
    """The declared shape in words: ``a list of strings``, ``one URI``, ``an object``."""
    options = _options(schema)
    if options is not None:
        return " or ".join(_declared(option) for option in options)
    types = sorted(_types(schema))
    if not types:
        return "any value"
    words = []
    for name in types:
        if name == "array":
            items = schema.get("items")
            inner = _declared(items) if isinstance(items, dict) and _types(items) else "values"
            words.append(f"a list of {_plural(inner)}")
        elif name == "string" and schema.get("format") == "uri":
            words.append("one URI")
        else:
            words.append(_NAMES[_TYPES[name][0]])
    return " or ".join(words)


def _plural(words: str) -> str:
    if words == "one URI":
        return "URIs"
    if words.startswith(("a ", "an ")):
        noun = words.split(" ", 1)[1]
        return noun + ("es" if noun.endswith("x") else "s")
    return words


Document = Callable[[Any], Awaitable[dict[str, Any] | None]]


class OutputContract:
    """Each route's ``Output`` schema, applied to the outputs of its jobs.

    Parameters
    ----------
    routes : iterable
        The configured routes (:class:`gateway.config.RouteSettings`), found by the
        job's route key (``model`` or ``model:version``).
    document : callable
        ``await document(route)``: the route's OpenAPI document or None
        (:meth:`gateway.validation.Schemas.document`).
    cached : callable
        ``cached(route)``: the document if already loaded, without I/O (for interim
        outputs, on the hot path of progress).
    held : callable
        ``held(route)``: whether ``document(route)`` would answer without I/O
        (:meth:`gateway.validation.Schemas.held`).
    """

    def __init__(
        self,
        routes: Iterable[Any],
        document: Document,
        cached: Callable[[Any], dict[str, Any] | None],
        held: Callable[[Any], bool],
    ) -> None:
        self._routes = {route_key(r.model, r.version): r for r in routes}
        self._document = document
        self._cached = cached
        self._held = held

    def held(self, route_key: str) -> bool:
        """Whether :meth:`conform` for ``route_key`` does no I/O: an unknown route (any
        output), or one whose schema this process holds already (no provider asked)."""
        route = self._routes.get(route_key)
        return route is None or self._held(route)

    async def conform(self, route_key: str, output: Any) -> Any:
        """:func:`conform` with the schema of ``route_key`` (any output for an unknown
        route or a route whose schema is unknown).

        Raises
        ------
        OutputMismatch
            See :func:`conform`.
        """
        route = self._routes.get(route_key)
        if route is None:
            return output
        try:
            document = await self._document(route)
        except CutoverError:  # an unreadable schema: creates say so; the output stands
            return output
        return conform(output_schema(document), output)

    def interim(self, route_key: str, output: Any) -> Any:
        """:func:`interim` with the route's schema, when this process has loaded it."""
        route = self._routes.get(route_key)
        if route is None or output is None:
            return output
        return interim(output_schema(self._cached(route)), output)
