"""The examples/noise model behind fal's queue wire format, for `make demo-translation`.

A local stand-in for a fal app (docs/providers.md, "fal"): the fal queue server of the
test suite (tests/support/upstreams/fal.py: submit, status, result, cancel, the JWKS and
Ed25519-signed completion webhooks) in its self-completing mode, whose app renders the
noise model's picture (examples/noise/predict.py ``render``, the candidate's red shift)
and answers as fal's image apps do: ``{"images": [{"url", "width", "height",
"content_type"}], "seed", "has_nsfw_concepts", "prompt"}``. It reads fal's inputs
(``prompt``, ``seed``, ``image_size: {width, height}``) and ignores others, as fal does.

    .venv/bin/python examples/fal_noise.py --port PORT [--ca CA.pem]

``--ca``: the CA its webhooks to an HTTPS gateway are verified with. Runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import signal
import ssl
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples" / "noise")]

from predict import RED_SHIFT_LEVELS, SIZE_PX, render  # noqa: E402

from tests.support.upstreams.base import UpJob  # noqa: E402
from tests.support.upstreams.fal import FakeFal  # noqa: E402

TOKEN = "fal-demo-key"  # noqa: S105 (a local demo value, not a credential)


class NoiseOnFal(FakeFal):
    """The fal queue whose jobs finish at once with the noise model's picture."""

    def echo(self, job: UpJob) -> Any:
        size = job.input.get("image_size") or {}
        width = int(size.get("width") or SIZE_PX)
        seed = job.input.get("seed")
        image = render(str(job.input.get("prompt", "")), seed, size_px=width,
                       red_shift=RED_SHIFT_LEVELS)
        buffer = io.BytesIO()
        image.save(buffer, format="PNG")
        url = self.file_value(f"{job.id}.png", buffer.getvalue())
        return {"images": [{"url": url, "width": width, "height": width,
                            "content_type": "image/png"}],
                "seed": seed if seed is not None else 0, "has_nsfw_concepts": [False],
                "prompt": job.input.get("prompt", "")}


async def serve(port: int, ca: str | None) -> None:
    server = NoiseOnFal(auto=True, token=TOKEN)
    server.port = port
    if ca:
        server.ssl_context = ssl.create_default_context(cafile=ca)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with server:
        print(f"fal wire server for examples/noise on {server.url}", flush=True)
        await stop.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ca")
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.ca))
