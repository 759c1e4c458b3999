"""Echo: the smallest useful Cog model, our own upstream for demos and tests.

The prompt comes back upper-cased, as plain text, a JSON object, one text file, or that
file plus a 1 KiB binary file. ``steps`` prints one ``step i/n`` log line per step,
``delay`` waits that many seconds per step, and ``fail`` raises instead of answering.
"""

import tempfile
import time
from typing import Any

from cog import BasePredictor, Input, Path

BINARY_PAYLOAD = bytes(range(256)) * 4


def _scratch_file(name: str) -> Path:
    """A fresh path under the process's TMPDIR (Cog serves it back as a data: URI)."""
    return Path(tempfile.mkdtemp(prefix="echo-")) / name


class Predictor(BasePredictor):
    def predict(
        self,
        prompt: str = Input(description="The text to echo, upper-cased"),
        steps: int = Input(default=1, ge=0, le=1000, description="How many log lines"),
        delay: float = Input(
            default=0.0, ge=0.0, le=120.0, description="Seconds to wait per step"
        ),
        fail: bool = Input(default=False, description="Raise ValueError instead"),
        output_kind: str = Input(
            default="text",
            choices=["text", "json", "file", "files"],
            description="Shape of the answer",
        ),
    ) -> Any:
        for step in range(1, steps + 1):
            print(f"step {step}/{steps}", flush=True)
            if delay:
                time.sleep(delay)
        if fail:
            raise ValueError(f"asked to fail: {prompt}")
        shout = prompt.upper()
        if output_kind == "json":
            return {"prompt": prompt, "steps": steps}
        if output_kind not in ("file", "files"):
            return shout
        text_file = _scratch_file("out.txt")
        text_file.write_text(shout)
        if output_kind == "file":
            return text_file
        blob = _scratch_file("second.bin")
        blob.write_bytes(BINARY_PAYLOAD)
        return [text_file, blob]
