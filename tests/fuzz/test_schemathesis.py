"""schemathesis against the gateway's own ``GET /openapi.json``: every operation fuzzed.

The document the gateway serves (docs/openapi.md) is loaded as it is; schemathesis makes a
Hypothesis strategy of requests for each of its operations, valid (positive) and invalid
(negative: wrong types, missing or extra fields, bad path parameters), and one test
draws from all of them. Path parameters are often replaced by names that exist (a
prediction, a file, the routed model), so the requests reach real rows; the API token,
the admin token or none is sent as the path needs; query parameters (the list's cursor
and times, a stream's ``t``, a signed download's ``expiry`` and ``signature``) are often
replaced by non-ASCII text. Each answer is checked as in
tests/support/fuzzing.py: no 5xx, every refusal a problem+json 4xx, no refused request
changes any row.

``make test`` sends 1,000 requests; ``CUTOVER_FUZZ_FULL=1`` sends 5,000 (the command is
in docs/reliability.md, "Fuzzing").
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
import schemathesis
from hypothesis import given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from tests.support.fuzzing import ADMIN_TOKEN, FUZZ, Live
from tests.support.gateway import TOKEN, VERSION

pytestmark = pytest.mark.timeout(900)

NON_ASCII = st.text(min_size=1, max_size=20).filter(lambda t: not t.isascii()) | st.sampled_from(
    ["\u00e9", "caf\u00e9", "\U0001f600", "\u00ff" * 40])
REQUESTS = 5000 if os.environ.get("CUTOVER_FUZZ_FULL") == "1" else 1000


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    made = Live(tmp_path_factory.mktemp("schemathesis"), admin={"tokens": [ADMIN_TOKEN]})
    yield made
    made.close()
    print(f"schemathesis: {made.requests} requests, by status: "
          f"{dict(sorted(made.statuses.items()))}")


def _cases(live: Live) -> tuple[st.SearchStrategy[Any], dict[str, list[str]]]:
    """Every operation of the served document, positive and negative; and real values
    for its path parameters."""
    status, _, body = live.call("GET", "/openapi.json")
    assert status == 200
    schema = schemathesis.openapi.from_dict(json.loads(body))
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 40  # the whole API, admin included
    made = json.loads(live.call("POST", "/v1/predictions", headers=_auth("/v1/predictions"),
                                json={"version": VERSION, "input": {"prompt": "p"}})[2])
    form = aiohttp.FormData()
    form.add_field("content", b"fuzz", filename="f.bin", content_type="text/plain")
    upload = live.call("POST", "/v1/files", headers=_auth("/v1/files"), data=form)
    real = {
        "id": [made["id"], *([json.loads(upload[2])["id"]] if upload[0] == 201 else [])],
        "job_id": [made["id"]], "provider": ["fake"], "owner": ["acme"],
        "name": ["echo", "plain"], "version": [VERSION],
    }
    live.snapshot = live.rows()
    modes = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    strategy = st.one_of([op.as_strategy(generation_mode=m) for op in operations for m in modes])
    return strategy, real


def _auth(path: str) -> dict[str, str]:
    token = ADMIN_TOKEN if path.startswith("/admin/") else TOKEN
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def cases(live: Live) -> tuple[st.SearchStrategy[Any], dict[str, list[str]]]:
    return _cases(live)


def test_every_operation_of_the_openapi_document(
    live: Live, cases: tuple[st.SearchStrategy[Any], dict[str, list[str]]]
) -> None:
    strategy, real = cases

    @settings(FUZZ, max_examples=REQUESTS)
    @given(case=strategy, data=st.data(), auth=st.sampled_from(["right"] * 5 + ["none"]))
    def one(case: Any, data: st.DataObject, auth: str) -> None:
        for name in list(case.path_parameters or {}):
            if name in real and data.draw(st.booleans(), label=f"real {name}"):
                case.path_parameters[name] = data.draw(st.sampled_from(real[name]))
        for name in list(case.query or {}):  # non-ASCII capabilities were a 500 (issue 20)
            if data.draw(st.booleans(), label=f"non-ASCII {name}"):
                case.query[name] = data.draw(NON_ASCII, label=name)
        headers = _auth(case.path) if auth == "right" else {}
        response = case.call(base_url=live.base_url, headers=headers, timeout=30)
        content_type = response.headers.get("content-type", [""])[0].split(";")[0]
        live.verdict(f"{case.method} {case.formatted_path}", response.status_code,
                     content_type, response.content)

    one()
    assert live.requests >= REQUESTS
