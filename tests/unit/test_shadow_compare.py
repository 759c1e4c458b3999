"""Unit tests of one pair's comparison (shadow/compare.py, shadow/media.py); no disk."""

from __future__ import annotations

import base64
import hashlib
import io
import random
import struct
import subprocess
import sys
import zlib
from datetime import UTC, datetime, timedelta

import pytest
from PIL import Image
from pydantic import ValidationError

from contracts.job import Job, JobState
from shadow import compare, media
from shadow.outcome import Outcome, OutputFile
from tests.support.shadow import completed, failed


def png(colour: tuple[int, int, int], size: tuple[int, int] = (64, 64)) -> bytes:
    buffer = io.BytesIO()
    image = Image.new("RGB", size, colour)
    for x in range(0, size[0], 8):  # some structure for the perceptual hash
        for y in range(size[1]):
            image.putpixel((x, y), (0, 0, 0))
    image.save(buffer, format="PNG")
    return buffer.getvalue()


class Store:
    """An in-memory Reader: bytes by sha256."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.reads = 0

    def add(self, data: bytes, content_type: str = "image/png") -> OutputFile:
        digest = hashlib.sha256(data).hexdigest()
        self.blobs[digest] = data
        return OutputFile(content_type=content_type, size_bytes=len(data), sha256=digest,
                          url=f"https://gw.test/{digest[:8]}", key=digest)

    async def read(self, file: OutputFile) -> bytes:
        self.reads += 1
        if file.key not in self.blobs:
            raise FileNotFoundError(file.key)
        return self.blobs[file.key]


def with_files(*files: OutputFile) -> Outcome:
    output = [f.url for f in files] if len(files) != 1 else files[0].url
    return completed(output, files)


async def test_same_outputs_have_no_break_and_zero_measures():
    store = Store()
    a = store.add(png((200, 10, 10)))
    result = await compare.compare(with_files(a), with_files(a), read=store.read)
    assert result.breaks == ()
    assert result.measures == {
        "list_length": 0.0, "file_size": 0.0, "file_bytes": 0.0,
        "image_size": 0.0, "image_phash": 0.0, "image_color": 0.0,
    }
    assert store.reads == 0, "identical digests need no read"


async def test_images_are_measured_in_size_hash_and_colour():
    store = Store()
    a, b = store.add(png((200, 10, 10))), store.add(png((210, 10, 10), size=(64, 48)))
    result = await compare.compare(with_files(a), with_files(b), read=store.read)
    assert result.breaks == ()
    assert result.measures["image_size"] == pytest.approx(0.25)
    assert result.measures["image_color"] > 5
    assert result.measures["file_bytes"] == 1.0
    assert 0 <= result.measures["image_phash"] <= 64


async def test_status_is_a_contract_break_and_stops_there():
    result = await compare.compare(completed("x"), failed("CUDA out of memory"))
    assert [(b.kind, b.control, b.candidate) for b in result.breaks] == [
        ("status", "completed", "failed")
    ]
    assert result.measures == {}
    assert result.candidate.error_class == "out_of_memory"


async def test_both_failed_compares_error_classes():
    same = await compare.compare(failed("ValueError: a"), failed("ValueError: b"))
    other = await compare.compare(failed("ValueError: a"), failed("prediction timed out"))
    assert same.breaks == () and same.measures == {"error_class": 0.0}
    assert other.measures == {"error_class": 1.0}


@pytest.mark.parametrize(("error", "expected"), [
    (None, "none"), ("Deadline exceeded", "timeout"), ("NSFW content detected", "safety"),
    ("KeyError: 'x'", "KeyError"), ("something odd", "other"), ("canceled by user", "canceled"),
])
def test_error_classes(error, expected):
    assert compare.error_class(error) == expected


async def test_type_key_file_count_and_content_type_are_contract_breaks():
    store = Store()
    image, text = store.add(png((1, 2, 3))), store.add(b"hello", "text/plain; charset=utf-8")
    control = completed({"a": 1, "file": image.url}, (image,))
    candidate = completed({"a": "1", "file": text.url, "b": 2}, (text, image))
    result = await compare.compare(control, candidate, read=store.read)
    kinds = sorted((b.kind, b.path) for b in result.breaks)
    assert kinds == [("content_type", "files[0]"), ("file_count", "files"), ("key", "$.b"),
                     ("type", "$.a")]
    assert result.is_contract_break


async def test_text_similarity_of_outputs_and_text_files():
    store = Store()
    a = store.add(b"The Quick  brown fox", "text/plain")
    b = store.add(b"the quick brown fox", "text/plain")
    result = await compare.compare(with_files(a), with_files(b), read=store.read)
    assert result.measures["text"] == 0.0, "case and whitespace are normalized away"
    tokens = await compare.compare(completed(["Hel", "lo ", "world"]),
                                   completed(["Hello", " word"]))
    assert tokens.breaks == ()
    assert 0 < tokens.measures["text"] < 0.15
    assert tokens.control.text == "Hello world"


async def test_an_undecodable_image_is_a_break_and_an_unreadable_file_a_note():
    store = Store()
    good, bad = store.add(png((9, 9, 9))), store.add(b"not a png")
    broken = await compare.compare(with_files(good), with_files(bad), read=store.read)
    assert [b.kind for b in broken.breaks] == ["undecodable"]
    missing = good.model_copy(update={"key": "gone", "sha256": "0" * 64})
    unread = await compare.compare(with_files(good), with_files(missing), read=store.read)
    assert unread.breaks == ()
    assert "image_color" not in unread.measures
    assert unread.notes and "FileNotFoundError" in unread.notes[0]


async def test_previews_are_png_data_uris_for_images_only():
    store = Store()
    image, text = store.add(png((0, 255, 0), size=(600, 300))), store.add(b"x", "text/plain")
    result = await compare.compare(completed([image.url, text.url], (image, text)),
                                   completed([image.url, text.url], (image, text)),
                                   read=store.read, previews=True)
    preview, none = result.control.previews
    assert none is None and preview.startswith("data:image/png;base64,")
    decoded = media._decode(base64.b64decode(preview.split(",", 1)[1]))
    assert decoded.size == (256, 128)


async def test_a_comparison_round_trips_through_json():
    result = await compare.compare(completed({"x": [1, 2]}, queue_s=1.5, cost_usd=0.01),
                                   completed({"x": [1]}, run_s=3.0))
    again = compare.PairComparison.model_validate_json(result.model_dump_json())
    assert again == result
    assert result.control.queue_s == 1.5 and result.candidate.run_s == 3.0
    assert result.measures["list_length"] == 1.0


def test_an_outcome_must_be_terminal_and_timezone_aware():
    with pytest.raises(ValidationError, match="terminal"):
        Outcome(status=JobState.RUNNING)
    with pytest.raises(ValidationError):
        Outcome(status="completed", created_at="2026-01-01T00:00:00")
    with pytest.raises(ValidationError):
        OutputFile(content_type="image/png", size_bytes=1, sha256="nothex")


def test_media_refuses_huge_or_empty_images(monkeypatch):
    monkeypatch.setattr(media, "MAX_IMAGE_PIXELS", 100)
    with pytest.raises(media.ImageError, match="too large"):
        media.compare_images(png((1, 1, 1)), png((1, 1, 1)))


def test_an_outcome_from_a_terminal_job():
    created = datetime(2026, 1, 1, tzinfo=UTC)
    job = Job(id="p1", state="completed", model="m", version="v", route="m", provider="cog",
              input={"prompt": "x"}, output="X", created_at=created,
              started_at=created + timedelta(seconds=2),
              completed_at=created + timedelta(seconds=5))
    outcome = Outcome.from_job(job, cost_usd=0.002)
    assert (outcome.queue_s, outcome.run_s, outcome.output) == (2.0, 3.0, "X")
    with pytest.raises(ValidationError, match="terminal"):
        Outcome.from_job(job.model_copy(update={"state": JobState.QUEUED}))


def test_importing_shadow_leaves_the_heavy_measure_libraries_unloaded():
    heavy = ("imagehash", "numpy", "scipy", "rapidfuzz", "PIL")
    script = ("import sys, shadow, shadow.report, shadow.policy\n"
              f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"


async def test_files_are_paired_by_where_their_url_appears_in_the_output():
    store = Store()
    image, text = store.add(png((5, 5, 5))), store.add(b"words", "text/plain")
    control = completed({"a_image": image.url, "b_text": text.url}, (text, image))
    candidate = completed({"a_image": image.url, "b_text": text.url}, (image, text))
    result = await compare.compare(control, candidate, read=store.read)
    assert result.breaks == ()
    assert [f.media_type for f in result.control.files] == ["image/png", "text/plain"]


async def test_structure_breaks_are_capped_and_counted():
    control = completed([{"v": i} for i in range(50)])
    candidate = completed([{"v": str(i)} for i in range(50)])
    result = await compare.compare(control, candidate)
    assert len(result.breaks) == compare.MAX_STRUCTURE_BREAKS
    assert result.notes == ("30 more type or key differences not listed",)


def test_malformed_images_only_ever_raise_image_error():
    rng = random.Random(7)
    bases = []
    for fmt in ("PNG", "JPEG", "GIF"):
        buffer = io.BytesIO()
        Image.new("RGB", (32, 32), (1, 2, 3)).save(buffer, format=fmt)
        bases.append(buffer.getvalue())
    good = bases[0]
    for base in bases:
        for case in range(150):
            data = bytearray(base)
            if case % 3 == 0:
                data = data[: rng.randrange(1, len(data))]
            else:
                for _ in range(rng.randrange(1, 8)):
                    data[rng.randrange(len(data))] = rng.randrange(256)
            try:
                media.compare_images(bytes(data), good)
            except media.ImageError:
                pass
    # a header that claims 20000 x 20000 pixels: refused before any pixel is decoded
    ihdr = struct.pack(">IIBBBBB", 20_000, 20_000, 8, 2, 0, 0, 0)
    chunk = struct.pack(">I", 13) + b"IHDR" + ihdr
    bomb = good[:8] + chunk + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr)) + good[33:]
    with pytest.raises(media.ImageError):
        media.compare_images(bomb, good)
