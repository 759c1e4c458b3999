"""Helpers for the shadow comparison tests: the example noise model and outcomes."""

from __future__ import annotations

import hashlib
import importlib.util
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from shadow.outcome import Outcome, OutputFile

ROOT = Path(__file__).resolve().parents[2]
NOISE_MODEL = ROOT / "examples" / "noise" / "predict.py"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def load_noise_model() -> ModuleType:
    """examples/noise/predict.py as a module (it needs only cog and Pillow)."""
    spec = importlib.util.spec_from_file_location("noise_predict", NOISE_MODEL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def file_of(path: Path, content_type: str = "image/png", url: str | None = None) -> OutputFile:
    """An OutputFile for bytes on disk, its URL defaulting to a fake gateway URL."""
    data = path.read_bytes()
    return OutputFile(
        content_type=content_type,
        size_bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        url=url or f"https://gateway.test/files/{hashlib.sha1(str(path).encode()).hexdigest()}",
        path=path,
    )


def completed(output: Any = None, files: tuple[OutputFile, ...] = (), *, queue_s: float = 0.5,
              run_s: float = 2.0, cost_usd: float | None = None) -> Outcome:
    """A completed outcome with the given output, files and timings (seconds)."""
    started = T0 + timedelta(seconds=queue_s)
    return Outcome(status="completed", output=output, files=files, created_at=T0,
                   started_at=started, completed_at=started + timedelta(seconds=run_s),
                   cost_usd=cost_usd)


def failed(error: str, *, queue_s: float = 0.5, run_s: float = 1.0) -> Outcome:
    """A failed outcome with an error text."""
    started = T0 + timedelta(seconds=queue_s)
    return Outcome(status="failed", error=error, created_at=T0, started_at=started,
                   completed_at=started + timedelta(seconds=run_s))


def predict_outcome(predictor: Any, prompt: str, seed: int | None = None, **timing: float
                    ) -> Outcome:
    """Run ``predictor.predict`` directly and wrap its PNG as a completed outcome."""
    path = Path(predictor.predict(prompt=prompt, seed=seed))
    file = file_of(path)
    return completed(file.url, (file,), **timing)
