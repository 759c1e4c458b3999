"""A fake OpenAI-compatible server: ``/v1/chat/completions`` (plain and streamed SSE),
``/v1/completions`` and ``/v1/images/generations`` (``b64_json``).

Each call is a job of the base class while it is held. The answer is the prompt
upper-cased, one word per streamed chunk. With ``max_tokens`` in the request the answer
is that many ``"tok "`` chunks, 0.1 s apart (a long call to cancel). A job the test
``fail``\\ s answers 500; :attr:`gate` (if set) holds every answer until it opens.
:attr:`FakeOpenAI.rewrite` (if set) maps a prompt to the text to answer instead (a model
that answers some prompts differently, for shadow tests).

Stream faults, as real servers produce them (docs/providers.md, "OpenAI-compatible"):
:attr:`FakeOpenAI.stream_end` ``"eof"`` ends a stream after its ``finish_reason`` chunk
without ``[DONE]`` (TGI before 2.1.1); :attr:`FakeOpenAI.stream_error` is written after the
first chunk instead of the rest: :data:`IN_BAND_ERRORS` holds TGI's, vLLM's and
llama.cpp's forms.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from tests.support.upstreams.base import FakeUpstream, UpJob

__all__ = ["IN_BAND_ERRORS", "OPENAI_TOKEN", "FakeOpenAI"]

OPENAI_TOKEN = "sk-test-openai"  # a test value, not a credential

#: Server -> (its in-band error event, the message the app should read).
IN_BAND_ERRORS: dict[str, tuple[str, str]] = {
    "tgi": (  # no [DONE] follows (huggingface/text-generation-inference#1896)
        'data: {"error":"Input validation error: `top_p` must be > 0.0 and < 1.0",'
        '"error_type":"validation"}\n\n',
        "Input validation error: `top_p` must be > 0.0 and < 1.0 (validation)",
    ),
    "vllm": (  # then [DONE]
        'data: {"error": {"object": "error", "message": "This model\'s maximum context length'
        ' is 4096 tokens", "type": "BadRequestError", "param": null, "code": 400}}\n\n'
        "data: [DONE]\n\n",
        "This model's maximum context length is 4096 tokens (BadRequestError)",
    ),
    "llama.cpp": (  # the non-standard ``error:`` field of 2025 builds, then [DONE]
        'error: {"code":400,"message":"the request exceeds the available context size",'
        '"type":"invalid_request_error"}\n\ndata: [DONE]\n\n',
        "the request exceeds the available context size (invalid_request_error)",
    ),
}


class FakeOpenAI(FakeUpstream):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{**kwargs, "auto": False})  # a call runs while it is held
        self.gate: asyncio.Event | None = None
        self.closed_early = 0  # calls whose client went away before the answer ended
        self.stream_end = "done"  # "done": [DONE] last; "eof": the finish_reason chunk last
        self.stream_error: str | None = None  # raw events sent after the first chunk
        self.rewrite: Callable[[str], str] | None = None  # prompt -> the text to answer

    def routes(self, router: web.UrlDispatcher) -> None:
        router.add_post("/v1/chat/completions", self._chat)
        router.add_post("/v1/completions", self._completions)
        router.add_post("/v1/images/generations", self._images)

    async def _accept(self, request: web.Request) -> tuple[UpJob | None, Any, web.Response | None]:
        if (answer := self.faulted("submit", request)) is not None:
            return None, None, answer
        if (denied := self.check_auth(request, "Bearer")) is not None:
            return None, None, denied
        body = await request.json()
        prompt = _prompt(body)
        job = self.new_job({"prompt": prompt}, None, scope=str(body.get("model", "")))
        job.state = "running"
        while self.gate is not None and not self.gate.is_set():
            if request.transport is None or request.transport.is_closing():
                self.closed_early += 1  # the caller hung up: that is how a call is canceled
                job.state = "canceled"
                return job, body, web.Response(status=499)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.gate.wait(), 0.01)
        if job.input.get("fail") or job.state == "failed":
            return job, body, web.json_response({"error": {"message": job.error}}, status=500)
        return job, body, None

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._text(request, chat=True)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._text(request, chat=False)

    async def _text(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        job, body, answer = await self._accept(request)
        if answer is not None:
            return answer
        assert job is not None
        if self.rewrite is not None:
            job.input["prompt"] = self.rewrite(str(job.input["prompt"]))
        words = _words(job, body)
        if not body.get("stream"):
            text = "".join(words)
            choice = ({"message": {"role": "assistant", "content": text}} if chat
                      else {"text": text})
            job.state, job.output = "succeeded", [text]
            return web.json_response({
                "id": job.id, "choices": [{"index": 0, "finish_reason": "stop", **choice}],
                "usage": {"prompt_tokens": 3, "completion_tokens": len(words)},
            })
        return await self._stream(request, job, body, words, chat)

    async def _stream(self, request: web.Request, job: UpJob, body: dict[str, Any],
                      words: list[str], chat: bool) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        delay = 0.1 if "max_tokens" in body else 0.0
        try:
            for n, word in enumerate(words):
                part = {"delta": {"content": word}} if chat else {"text": word}
                chunk = {"id": job.id, "choices": [{"index": 0, **part, "finish_reason": None}]}
                await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
                if self.stream_error is not None and n == 0:
                    await response.write(self.stream_error.encode())
                    job.state = "failed"
                    await response.write_eof()
                    return response
                if delay:
                    await asyncio.sleep(delay)
            end = {"id": job.id, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            done = "data: [DONE]\n\n" if self.stream_end == "done" else ""
            await response.write(f"data: {json.dumps(end)}\n\n{done}".encode())
        except (ConnectionResetError, asyncio.CancelledError):
            self.closed_early += 1
            job.state = "canceled"
            raise
        job.state, job.output = "succeeded", words
        await response.write_eof()
        return response

    async def _images(self, request: web.Request) -> web.Response:
        job, body, answer = await self._accept(request)
        if answer is not None:
            return answer
        assert job is not None
        count = int(body.get("n", 1))
        data = base64.b64encode(str(job.input["prompt"]).upper().encode()).decode()
        job.state, job.output = "succeeded", data
        return web.json_response({"created": 0, "data": [{"b64_json": data}] * count})


def _prompt(body: Any) -> str:
    if not isinstance(body, dict):
        return ""
    if isinstance(body.get("prompt"), str):
        return str(body["prompt"])
    messages = body.get("messages") or []
    last = messages[-1]["content"] if messages else ""
    if isinstance(last, list):
        last = next((p.get("text", "") for p in last if p.get("type") == "text"), "")
    return str(last)


def _words(job: UpJob, body: dict[str, Any]) -> list[str]:
    if isinstance(body.get("max_tokens"), int):
        return ["tok "] * body["max_tokens"]
    words = str(job.input["prompt"]).upper().split(" ")
    return [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
