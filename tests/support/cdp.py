"""Real headless Chromium driven over the DevTools protocol, for page tests over HTTP.

This loads a URL from a running server with request headers of the test's choosing (an
admin token), records every request the page makes (to prove it works offline), and
returns the page's element boxes and a full-page screenshot, so pixels can be checked
inside each box. The browser is found by :func:`tests.support.browser.chromium`.

One short-lived browser per :func:`launch` (its own throw-away profile, no sandbox, no
GPU, a device scale factor of 1: one CSS pixel is one screenshot pixel), in its own
process group, stopped with SIGTERM then SIGKILL; it also dies with the test run.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import re
import signal
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tests.support.browser import chromium
from tests.support.orphans import die_with_parent

__all__ = ["Box", "Loaded", "Page", "launch"]

_START_S = 60.0
_CALL_S = 60.0
_LISTENING = re.compile(rb"DevTools listening on (ws://\S+)")


@dataclass(frozen=True)
class Box:
    """An element's box on the page, in CSS pixels from the page's top left corner;
    ``loaded`` is false for an ``<img>`` whose image did not decode."""

    tag: str
    x: float
    y: float
    width: float
    height: float
    loaded: bool = True


@dataclass
class Loaded:
    """What loading a URL did: the main document's HTTP status and every request's URL."""

    status: int | None = None
    requests: list[str] = field(default_factory=list)


class Page:
    """One browser tab over its DevTools WebSocket (see the module docstring)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._ids = itertools.count(1)
        self._calls: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._events: list[dict[str, Any]] = []
        self._event = asyncio.Event()
        self._reader = asyncio.create_task(self._read(), name="cdp-reader")

    async def _read(self) -> None:
        async for message in self._ws:
            if message.type != aiohttp.WSMsgType.TEXT:
                break
            data = json.loads(message.data)
            if "id" in data and data["id"] in self._calls:
                self._calls.pop(data["id"]).set_result(data)
            elif "method" in data:
                self._events.append(data)
                self._event.set()
        for future in self._calls.values():
            if not future.done():
                future.set_exception(ConnectionError("the DevTools connection closed"))

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its ``result`` (AssertionError on a protocol error)."""
        call_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._calls[call_id] = future
        await self._ws.send_str(json.dumps({"id": call_id, "method": method, "params": params}))
        answer = await asyncio.wait_for(future, _CALL_S)
        assert "error" not in answer, f"{method}: {answer['error']}"
        return dict(answer.get("result", {}))

    async def _until(self, method: str, timeout_s: float) -> dict[str, Any]:
        async def seen() -> dict[str, Any]:
            while True:
                found = next((e for e in self._events if e["method"] == method), None)
                if found is not None:
                    return found
                self._event.clear()
                await self._event.wait()

        return await asyncio.wait_for(seen(), timeout_s)

    async def load(self, url: str, *, headers: dict[str, str] | None = None,
                   width: int = 1280, timeout_s: float = 60.0) -> Loaded:
        """Navigate to ``url`` sending ``headers`` with every request; wait for the load
        event, then size the viewport to the whole page (so nothing is scrolled)."""
        for domain in ("Network", "Page", "Runtime"):
            await self.call(f"{domain}.enable")
        await self.call("Network.setExtraHTTPHeaders", headers=headers or {})
        await self._viewport(width, 1000)
        self._events.clear()
        navigated = await self.call("Page.navigate", url=url)
        assert not navigated.get("errorText"), f"{url}: {navigated['errorText']}"
        await self._until("Page.loadEventFired", timeout_s)
        height = await self.evaluate("document.documentElement.scrollHeight")
        await self._viewport(width, int(height))
        loaded = Loaded()
        for event in self._events:
            params = event["params"]
            if event["method"] == "Network.requestWillBeSent":
                loaded.requests.append(params["request"]["url"])
            elif event["method"] == "Network.responseReceived" and params["type"] == "Document":
                loaded.status = int(params["response"]["status"])
        return loaded

    async def _viewport(self, width: int, height: int) -> None:
        await self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                        deviceScaleFactor=1, mobile=False)

    async def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression in the page."""
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    async def boxes(self, selector: str) -> list[Box]:
        """The boxes of the elements matching a CSS ``selector``, in document order."""
        found = await self.evaluate(
            f"[...document.querySelectorAll({json.dumps(selector)})].map(e => {{"
            "const r = e.getBoundingClientRect();"
            "return {tag: e.tagName.toLowerCase(), x: r.x + scrollX, y: r.y + scrollY,"
            " width: r.width, height: r.height,"
            " loaded: e.tagName !== 'IMG' || (e.complete && e.naturalWidth > 0)};})"
        )
        return [Box(**box) for box in found]

    async def screenshot(self) -> bytes:
        """A PNG of the whole page as sized by :meth:`load`."""
        shot = await self.call("Page.captureScreenshot", format="png", fromSurface=True)
        return base64.b64decode(shot["data"])

    async def close(self) -> None:
        await self._ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


async def _listening(proc: asyncio.subprocess.Process, tail: list[bytes]) -> str:
    assert proc.stderr is not None
    while True:
        line = await proc.stderr.readline()
        if not line:
            raise AssertionError("chromium exited before listening:\n"
                                 + b"".join(tail[-30:]).decode(errors="replace"))
        tail.append(line)
        match = _LISTENING.search(line)
        if match:
            return match.group(1).decode()


async def _drain(proc: asyncio.subprocess.Process, tail: list[bytes]) -> None:
    assert proc.stderr is not None
    while line := await proc.stderr.readline():
        tail.append(line)
        del tail[:-200]


@contextlib.asynccontextmanager
async def launch() -> AsyncIterator[Page]:
    """A headless Chromium and its first tab (skips the test without a browser)."""
    browser = chromium()
    with tempfile.TemporaryDirectory(prefix="cutover-cdp-") as profile:
        proc = await asyncio.create_subprocess_exec(
            browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--no-first-run", "--no-default-browser-check", "--disable-extensions",
            "--disable-background-networking", "--force-device-scale-factor=1",
            "--remote-debugging-port=0", f"--user-data-dir={profile}", "about:blank",
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE, start_new_session=True,
            preexec_fn=die_with_parent,
        )
        tail: list[bytes] = []
        drain: asyncio.Task[None] | None = None
        try:
            browser_ws = await asyncio.wait_for(_listening(proc, tail), _START_S)
            drain = asyncio.create_task(_drain(proc, tail))
            port = re.search(r":(\d+)/", browser_ws).group(1)  # type: ignore[union-attr]
            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{port}/json/list") as response:
                    targets = await response.json()
                page_ws = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
                ws = await session.ws_connect(page_ws, max_msg_size=0)
                page = Page(ws)
                try:
                    yield page
                finally:
                    await page.close()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
            if drain is not None:
                drain.cancel()
