"""The model schema the ``openai`` adapter implements (docs/translation.md, "Schemas").

An OpenAI-compatible server has no Cog schema to read, but the adapter's input mapping
(:mod:`adapters.openai_mapping`) is a contract of its own: these are the inputs it maps,
and the output it gives. Chat and completions are a language model (an array of strings
that the clients iterate, ``x-cog-array-type: iterator``, and show joined,
``x-cog-array-display: concatenate``, as Replicate's language models declare); images a
list of image URIs.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["model_schema"]

_NUMBER = {"type": "number"}
_INTEGER = {"type": "integer"}

_LANGUAGE_INPUTS: dict[str, Any] = {
    "prompt": {"type": "string", "description": "The user message (completions: the prompt)"},
    "system_prompt": {"type": "string", "description": "A first system message (chat)"},
    "image": {"type": "string", "format": "uri", "description": "An image for the user "
              "message (chat): a URL or a data: URI"},
    "max_tokens": {**_INTEGER, "minimum": 1},
    "max_new_tokens": {**_INTEGER, "minimum": 1, "description": "Same as max_tokens"},
    "temperature": {**_NUMBER, "minimum": 0},
    "top_p": {**_NUMBER, "minimum": 0, "maximum": 1},
    "seed": _INTEGER,
    "presence_penalty": _NUMBER,
    "frequency_penalty": _NUMBER,
    "stop": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
             "description": "Stop sequences (a comma-separated string is split)"},
    "stop_sequences": {"anyOf": [{"type": "string"},
                                 {"type": "array", "items": {"type": "string"}}]},
}

_IMAGE_INPUTS: dict[str, Any] = {
    "prompt": {"type": "string"},
    "width": {**_INTEGER, "minimum": 1},
    "height": {**_INTEGER, "minimum": 1},
    "size": {"type": "string", "description": "<width>x<height>"},
    "quality": {"type": "string"},
    "style": {"type": "string"},
    "num_outputs": {**_INTEGER, "minimum": 1},
    "seed": _INTEGER,
}

_TEXT_OUTPUT: dict[str, Any] = {
    "type": "array", "items": {"type": "string"}, "title": "Output",
    "x-cog-array-type": "iterator", "x-cog-array-display": "concatenate",
}
_IMAGES_OUTPUT: dict[str, Any] = {
    "type": "array", "items": {"type": "string", "format": "uri"}, "title": "Output",
}


def model_schema(api: str) -> dict[str, Any]:
    """The OpenAPI document (Cog's shape) of the model ``api`` (``chat``,
    ``completions`` or ``images``) serves through the adapter; a fresh copy."""
    inputs = _IMAGE_INPUTS if api == "images" else _LANGUAGE_INPUTS
    properties = {
        name: {**schema, "title": name.replace("_", " ").title(), "x-order": order}
        for order, (name, schema) in enumerate(inputs.items())
    }
    return copy.deepcopy({
        "openapi": "3.0.2",
        "info": {"title": "Cog", "version": "0.1.0"},
        "paths": {},
        "components": {"schemas": {
            "Input": {"type": "object", "title": "Input", "required": ["prompt"],
                      "properties": properties},
            "Output": _IMAGES_OUTPUT if api == "images" else _TEXT_OUTPUT,
        }},
    })
