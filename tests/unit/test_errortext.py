"""adapters/errortext.py: provider errors are one line of at most 1 KB without payloads,
fal's detail keeps fal's words without the echoed input, kept bodies are bounded."""

from __future__ import annotations

import base64
import hashlib
import json

from hypothesis import given
from hypothesis import strategies as st

from adapters import errortext

B64 = base64.b64encode(bytes(range(256)) * 8).decode()


@given(st.text(max_size=5000))
def test_one_line_is_one_line_of_at_most_1_kb(text: str) -> None:
    line = errortext.one_line(text)
    assert len(line.encode()) <= errortext.MAX_ERROR_BYTES
    assert not any(c in line for c in "\n\r\t")


@given(st.text(alphabet="abc ,;:", max_size=50), st.text(alphabet="abc ,;:", max_size=50))
def test_data_uris_and_base64_runs_never_survive(before: str, after: str) -> None:
    text = f"{before} data:image/png;base64,{B64} {after} {B64}"
    scrubbed = errortext.one_line(text, 100_000)
    assert B64[100:160] not in scrubbed and "base64," not in scrubbed


def test_fal_detail_names_the_field_in_fals_words_without_the_input() -> None:
    detail = [{"loc": ["body", "prompt"], "msg": "The content was flagged.",
               "type": "content_policy_violation", "input": "secret words"},
              {"loc": ["body", "images", 0], "msg": "Bad image", "input": B64}]
    text = errortext.fal_detail(detail)
    assert text == ("prompt: The content was flagged. (content_policy_violation); "
                    "images.0: Bad image")
    assert errortext.fal_detail("Request timed out") == "Request timed out"


def test_a_kept_body_drops_echoes_and_payloads_and_is_bounded_with_a_digest() -> None:
    small = b'{"status": "OK", "payload": {"text": "hi"}}'
    assert errortext.kept_body(small) is small
    body = json.dumps({"payload": {"detail": [{"msg": "no", "input": "secret"}]},
                       "image": "data:image/png;base64," + B64 * 20}).encode()
    kept = errortext.kept_body(body)
    assert b"secret" not in kept and B64[:100].encode() not in kept
    big = json.dumps({"logs": "x " * 20_000}).encode()
    cut = errortext.kept_body(big)
    assert len(cut) <= errortext.MAX_KEPT_BODY_BYTES
    full = json.dumps(json.loads(big), separators=(",", ":")).encode()
    rest = full[errortext.MAX_KEPT_BODY_BYTES - 120 :]
    assert cut.startswith(full[:1000])
    assert hashlib.sha256(rest).hexdigest().encode() in cut
