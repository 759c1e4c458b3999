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
provider's URLs). Unknown input keys are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from contracts.errors import UpstreamRejected

__all__ = [
    "API_PATHS",
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


def build_request(api: str, model: str, data: Mapping[str, Any], stream: bool) -> dict[str, Any]:
    """The request body for ``api`` from a Replicate-style input.

    Raises
    ------
    UpstreamRejected
        No ``prompt`` (or not a string), or a value of the wrong type.
    """
    prompt = data.get("prompt")
    if not isinstance(prompt, str):
        raise UpstreamRejected("input.prompt: a string is required")
    body: dict[str, Any] = {"model": model}
    if api == "images":
        body.update(prompt=prompt, response_format="b64_json")
        body.update({dst: data[src] for src, dst in IMAGE_KEYS.items() if src in data})
        if "width" in data and "height" in data:
            body["size"] = f"{_int(data, 'width')}x{_int(data, 'height')}"
        return body
    body.update({dst: data[src] for src, dst in SAMPLING_KEYS.items() if src in data})
    if isinstance(body.get("stop"), str):
        body["stop"] = [part for part in body["stop"].split(",") if part]
    if api == "completions":
        body["prompt"] = prompt
    else:
        body["messages"] = _messages(prompt, data)
    if stream:
        body["stream"] = True
    return body


def _int(data: Mapping[str, Any], key: str) -> int:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise UpstreamRejected(f"input.{key}: an integer is required")
    return value


def _messages(prompt: str, data: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    system = data.get("system_prompt")
    if isinstance(system, str) and system:
        messages.append({"role": "system", "content": system})
    image = data.get("image")
    if isinstance(image, str) and image:
        content: Any = [
            {"type": "text", "text": prompt},
            {"type": "image_url", "image_url": {"url": image}},
        ]
    else:
        content = prompt
    messages.append({"role": "user", "content": content})
    return messages


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
