"""``cutover routes translate``: a route's translation for one provider, calling nobody.

``cutover routes translate ROUTE --provider P --input JSON [--output JSON]`` prints, in
order (docs/translation.md, "A dry run"):

1. the app's input checked against the route's ``Input`` schema (undeclared fields dropped,
   or refused with ``strict_inputs``, as at create);
2. the input map in use (the route's for ``P``, the adapter's default, or none) and the
   input it gives: what the adapter is handed;
3. the HTTP request ``P``'s adapter would send, captured from the real adapter by a
   transport that answers it without any network (hosted kinds and Cog; the in-process
   ``fake`` kind makes none);
4. with ``--output`` (the provider's output, as its adapter reads it: fal's result, a
   RunPod job's ``output``, an OpenAI-compatible call's chunks): the output map's result,
   then the output conformance check (:func:`gateway.translation.conformance.conform`): what the app
   would see.

The exit status is 0 when every step passes, 1 when one fails (its one-line reason
printed in its place), as for the other ``routes`` commands.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import httpx

from contracts.errors import ConfigurationError, ContractViolation, CutoverError
from contracts.snapshot import SubmitRequest
from gateway import providers
from gateway.config import RouteSettings, Settings
from gateway.rollout.spec import RouteSpec, route_key
from gateway.translation import conformance, maps
from gateway.translation.translator import input_of
from gateway.validation import PROVIDER_SCHEMA, InputValidator, load_schema

__all__ = ["add_command", "run"]

_CAPTURE_S = 5.0
_MISSING = object()
_HIDDEN_HEADERS = frozenset({"authorization", "x-api-key", "cookie"})


def add_command(actions: Any, common: Any) -> None:
    """``routes translate`` and its arguments."""
    command = common(actions.add_parser(
        "translate", help="the request a provider would get and the output the app would "
        "see, with every schema check, calling nobody"))
    command.add_argument("route", help="model or model:version, as in the config")
    command.add_argument("--provider", required=True, help="a configured provider's name")
    command.add_argument("--input", required=True, type=_json_object,
                         help="the app's input, a JSON object")
    command.add_argument("--output", type=json.loads,
                         help="the provider's output, JSON (as its adapter reads it)")


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--input is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--input must be a JSON object")
    return value


async def run(settings: Settings, spec: RouteSpec, args: argparse.Namespace) -> int:
    """Print the dry run of ``args.route`` on ``args.provider``; the exit status."""
    conf = settings.providers.get(args.provider)
    if conf is None:
        raise ContractViolation(f"provider {args.provider!r} is not configured "
                                f"(configured: {', '.join(settings.providers) or 'none'})")
    route = next(r for r in settings.routes if route_key(r.model, r.version) == args.route)
    adapter = providers.build_adapter(args.provider, conf.kind, **conf.adapter_options())
    try:
        default = adapter.capabilities.input_map
    finally:
        await adapter.aclose()
    own = spec.maps.get(args.provider, maps.MapSpec())
    program = own.input if own.input is not None else default
    origin = "the route's" if own.input is not None else "the adapter's default" if (
        default is not None) else "none: the input is passed as it is"
    document = _document(route)
    checked = _step("input schema", lambda: _check_input(document, route, args.input),
                    show=False)
    if checked is None:
        return 1
    mapped = _step(f"input map ({origin})", lambda: _mapped(program, checked, args.provider))
    if mapped is None:
        return 1
    request = await _captured(settings, route, args.provider, mapped, spec)
    _print_section(f"request {args.provider} ({conf.kind}) would get", request)
    if args.output is None:
        return 0
    seen = _step("output map", lambda: _output(own.output, args.output, args.provider),
                 missing=_MISSING)
    if seen is _MISSING:
        return 1
    schema = conformance.output_schema(document if isinstance(document, dict) else None)
    shown = _step("output schema, what the app would see",
                  lambda: conformance.conform(schema, seen), missing=_MISSING)
    return 1 if shown is _MISSING else 0


def _document(route: RouteSettings) -> dict[str, Any] | str | None:
    if route.openapi_schema is None:
        return None
    if route.openapi_schema == PROVIDER_SCHEMA:
        return PROVIDER_SCHEMA
    return load_schema(route.openapi_schema)


def _check_input(document: dict[str, Any] | str | None, route: RouteSettings,
                 value: dict[str, Any]) -> dict[str, Any]:
    """The input as the provider would get it (undeclared fields dropped, as at create),
    after printing what the check found."""
    if document is None:
        print("not checked: the route has no openapi_schema")
        return value
    if isinstance(document, str):
        print("not checked: the schema is read from the provider by a serving gateway")
        return value
    checked = InputValidator(document).check(value, strict=route.strict_inputs)
    print("valid" + (f"; dropped, as the model does not declare them: "
                     f"{', '.join(checked.dropped)}" if checked.dropped else ""))
    return checked.input


def _mapped(program: str | None, value: dict[str, Any], provider: str) -> dict[str, Any]:
    return value if program is None else input_of(program, value, provider)


def _output(program: str | None, value: Any, provider: str) -> Any:
    if program is None or value is None:
        return value
    return maps.run(program, value, what=f"the output map of provider {provider!r}")


def _step(title: str, step: Any, missing: Any = None, *, show: bool = True) -> Any:
    """``step()`` under ``== title``: its result printed (``show``) and returned, or its
    one-line failure printed and ``missing`` returned."""
    print(f"== {title}")
    try:
        result = step()
    except (CutoverError, ConfigurationError) as exc:
        print(f"FAILED: {exc.detail}\n")
        return missing
    if show:
        print(result if isinstance(result, str) else json.dumps(result, indent=2))
    print()
    return result


def _print_section(title: str, value: Any) -> None:
    text = value if isinstance(value, str) else json.dumps(value, indent=2)
    print(f"== {title}\n{text}\n")


async def _captured(settings: Settings, route: RouteSettings, name: str,
                    mapped: dict[str, Any], spec: RouteSpec) -> Any:
    """The first HTTP request ``name``'s real adapter makes to submit ``mapped``,
    answered by a transport that reaches no network."""
    conf = settings.providers[name]
    if conf.kind == "fake" and not conf.base_url:
        return {"note": "the in-process fake provider makes no HTTP request",
                "input": mapped}
    seen: list[httpx.Request] = []
    got = asyncio.Event()

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        got.set()
        return httpx.Response(400, json={"detail": "cutover routes translate: not sent"})

    options = {**conf.adapter_options(), "transport": httpx.MockTransport(answer)}
    placeholder = "<token>"  # shown hidden; the real credential is never read
    adapter = providers.build_adapter(name, conf.kind, token=placeholder, **options)
    target = route.target if name == spec.provider else route.candidate_target
    request = SubmitRequest(
        job_id="dry-run", input=mapped, model=route.model, version=route.version or "hidden",
        target=target, deadline=None,
        webhook_url=f"{settings.gateway.webhook_base_url}/provider-webhooks/{name}/dry-run/TOKEN"
        if adapter.capabilities.webhooks else None,
    )
    try:
        try:
            await adapter.submit(request)
        except CutoverError:
            pass  # the transport's answer: the request was made
        await asyncio.wait_for(got.wait(), _CAPTURE_S)
    finally:
        await adapter.aclose()
    return _shown(seen[0])


def _shown(request: httpx.Request) -> dict[str, Any]:
    headers = {k: ("<hidden>" if k.lower() in _HIDDEN_HEADERS else v)
               for k, v in request.headers.items()
               if k.lower() not in {"content-length", "accept-encoding", "connection",
                                    "user-agent", "host", "accept"}}
    body: Any = request.content.decode("utf-8", "replace") if request.content else None
    if body:
        try:
            body = json.loads(body)
        except ValueError:
            pass
    return {"method": request.method, "url": str(request.url), "headers": headers,
            "json": body}
