"""Replicate-style input -> OpenAI-compatible request, and response -> ``output``.

The mapping is data (docs/providers.md, "OpenAI-compatible" has the same table):

=====================================  ============================================
Replicate input                        OpenAI-compatible request
=====================================  ============================================
``prompt``                             chat: the user message; completions and
                                       images: ``prompt``
``system_prompt``                      chat: a first ``system`` message
``image`` (URL or ``data:`` URI)       chat: an ``image_url`` part of the user message
``max_tokens``, ``max_new_tokens``     ``max_tokens``
``temperature``, ``top_p``, ``seed``   the same names
``presence_penalty``,                  the same names
``frequency_penalty``
``stop``, ``stop_sequences``           ``stop`` (a comma-separated string is split)
``width`` + ``height``                 images: ``size`` ``"<width>x<height>"``
``size``, ``quality``, ``style``       images: the same names
``num_outputs``                        images: ``n``
=====================================  ============================================

Outputs: chat and completions give a list of string chunks, as Replicate's language
models do (one chunk per streamed delta, or one chunk); images give a list of files
(``data:`` URIs from ``b64_json``, which the gateway copies into owned storage, or the
provider's URLs). Unknown input keys are ignored. The input side is a jq program per
API (:data:`DEFAULT_MAPS`), the default map the gateway runs before ``submit``; a route's
own ``[routes.maps.PROVIDER] input`` replaces it (docs/translation.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

__all__ = [
    "API_PATHS",
    "DEFAULT_MAPS",
    "IMAGE_KEYS",
    "SAMPLING_KEYS",
    "Api",
    "build_request",
    "error_text",
    "output_of",
    "stream_error",
]

Api = Literal["chat", "completions", "images"]

API_PATHS: Mapping[str, str] = {
    "chat": "/chat/completions",
    "completions": "/completions",
    "images": "/images/generations",
}

#: Replicate key -> OpenAI key, for chat and completions.
SAMPLING_KEYS: Mapping[str, str] = {
    "max_tokens": "max_tokens",
    "max_new_tokens": "max_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "seed": "seed",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "stop": "stop",
    "stop_sequences": "stop",
}

#: Replicate key -> OpenAI key, for images.
IMAGE_KEYS: Mapping[str, str] = {
    "size": "size",
    "quality": "quality",
    "style": "style",
    "num_outputs": "n",
    "seed": "seed",
}


def _renamed(table: Mapping[str, str]) -> str:
    """The jq object of ``table`` (Replicate key -> OpenAI key): each OpenAI key from the
    last of its Replicate keys the input has (a key it has none of comes out ``null``,
    which the gateway does not send)."""
    sources: dict[str, list[str]] = {}
    for src, dst in table.items():
        sources.setdefault(dst, []).append(src)
    fields = []
    for dst, names in sources.items():
        expr = f".{names[0]}"
        for name in names[1:]:
            expr = f'(if has("{name}") then .{name} else {expr} end)'
        fields.append(f"{dst}: {expr}")
    return "{" + ", ".join(fields) + "}"


_PROMPT = """if (.prompt | type) != "string"
  then error("input.prompt: a string is required") else . end"""
_STOP = """if (.stop | type) == "string"
  then .stop = (.stop | split(",") | map(select(. != ""))) else . end"""
_INT = """def int($key): .[$key] as $v
  | if ($v | type) != "number" or ($v | floor) != $v
    then error("input.\\($key): an integer is required") else $v end;"""

#: The default input map per API, in jq (docs/translation.md, "Default maps"): the table
#: above. The gateway runs it when a route gives no input map for the provider; the
#: adapter then adds ``model`` (and ``stream``) to what it gives.
DEFAULT_MAPS: Mapping[str, str] = {
    "chat": f"""{_PROMPT}
| ({_renamed(SAMPLING_KEYS)} | {_STOP}) + {{messages: (
    [if (.system_prompt | type) == "string" and .system_prompt != ""
      then {{role: "system", content: .system_prompt}} else empty end]
    + [{{role: "user", content: (if (.image | type) == "string" and .image != ""
        then [{{type: "text", text: .prompt}}, {{type: "image_url", image_url: {{url: .image}}}}]
        else .prompt end)}}])}}""",
    "completions": f"""{_PROMPT}
| ({_renamed(SAMPLING_KEYS)} | {_STOP}) + {{prompt}}""",
    "images": f"""{_INT}
{_PROMPT}
| {{prompt, response_format: "b64_json"}} + {_renamed(IMAGE_KEYS)}
  + (if has("width") and has("height")
     then {{size: "\\(int("width"))x\\(int("height"))"}} else {{}} end)""",
}


def build_request(model: str, data: Mapping[str, Any], stream: bool) -> dict[str, Any]:
    """The request body: ``data`` (the input as mapped, :data:`DEFAULT_MAPS` by
    default) with ``model``, and ``stream`` for a streamed call."""
    body: dict[str, Any] = {"model": model, **data}
    if stream:
        body["stream"] = True
    return body


def delta_of(api: str, chunk: Any) -> str:
    """The text of one streamed chunk (chat ``delta.content`` or completions ``text``)."""
    choices = chunk.get("choices") if isinstance(chunk, Mapping) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return ""
    first = choices[0]
    if api == "chat":
        delta = first.get("delta")
        text = delta.get("content") if isinstance(delta, Mapping) else None
    else:
        text = first.get("text")
    return text if isinstance(text, str) else ""


def finish_reason(chunk: Any) -> str | None:
    """``choices[0].finish_reason`` when present."""
    choices = chunk.get("choices") if isinstance(chunk, Mapping) else None
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        reason = choices[0].get("finish_reason")
        return reason if isinstance(reason, str) else None
    return None


def output_of(api: str, body: Any) -> list[str]:
    """The Replicate ``output`` of a whole (non-streamed) response.

    Raises
    ------
    ValueError
        The body is not a response of ``api`` (no choices, no data).
    """
    if not isinstance(body, Mapping):
        raise ValueError("the response is not a JSON object")
    if api == "images":
        items = body.get("data")
        if not isinstance(items, list) or not items:
            raise ValueError("the response has no data list")
        return [_image(item) for item in items]
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise ValueError("the response has no choices")
    first = choices[0]
    message = first.get("message")
    text = message.get("content") if isinstance(message, Mapping) else first.get("text")
    if not isinstance(text, str):
        raise ValueError("the first choice has no text")
    return [text]


def _image(item: Any) -> str:
    if isinstance(item, Mapping):
        if isinstance(item.get("b64_json"), str):
            return "data:image/png;base64," + item["b64_json"]
        if isinstance(item.get("url"), str):
            return str(item["url"])
    raise ValueError("an image item has neither b64_json nor url")


def usage_metrics(body: Any) -> dict[str, Any]:
    """Token counts under Replicate's metric names, when the response has ``usage``."""
    usage = body.get("usage") if isinstance(body, Mapping) else None
    if not isinstance(usage, Mapping):
        return {}
    names = {"prompt_tokens": "input_token_count", "completion_tokens": "output_token_count"}
    return {dst: usage[src] for src, dst in names.items() if isinstance(usage.get(src), int)}


def stream_error(chunk: Any) -> Any:
    """The ``error`` of an in-band error event, or None for an ordinary chunk.

    Servers report a failure after the 200 inside the stream: ``{"error": "...",
    "error_type": ...}`` (TGI), ``{"error": {"message", "type", "code"}}`` (vLLM, SGLang,
    LiteLLM, llama.cpp), sometimes with ``"object": "error"`` at the top
    (docs/providers.md, "OpenAI-compatible").
    """
    if not isinstance(chunk, Mapping):
        return None
    if chunk.get("error") not in (None, ""):
        return chunk
    if chunk.get("object") == "error":
        return chunk
    return None


def error_text(error: Any) -> str:
    """An in-band error's own words: ``message`` (or the string), with its type or code."""
    if isinstance(error, Mapping):
        inner = error.get("error", error)
        if isinstance(inner, Mapping):
            message = inner.get("message") or inner.get("msg") or str(dict(inner))
            kind = inner.get("type") or inner.get("code")
        else:
            message = inner if isinstance(inner, str) else str(inner)
            kind = error.get("error_type") or error.get("type")
        return f"{message} ({kind})" if kind else str(message)
    return str(error)
