"""Routes as data in the store: seeding, audited changes, bad input (both backends)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from contracts.errors import ContractViolation, NotFound
from gateway.rollout.control import RouteControl
from gateway.rollout.spec import RouteSpec
from gateway.store.engine import db
from gateway.store.routes import RouteBook
from shadow.policy import ShadowPolicy

pytestmark = pytest.mark.every_backend  # the store's SQL is the point

ROUTE = "acme/echo"


@pytest.fixture
async def book(database_url: str) -> AsyncIterator[RouteBook]:
    engine = db.create_engine(database_url)
    await db.migrate(engine)
    try:
        yield RouteBook(engine)
    finally:
        await engine.dispose()


def _control(book: RouteBook) -> RouteControl:
    return RouteControl(book, routes=[ROUTE], providers=["control", "candidate"])


SPEC = RouteSpec(provider="control", candidate="candidate")


async def test_seeding_inserts_once_and_keeps_live_changes(book: RouteBook):
    assert [n.outcome for n in await book.seed({ROUTE: SPEC})] == ["inserted"]
    assert [n.outcome for n in await book.seed({ROUTE: SPEC})] == ["unchanged"]
    await _control(book).set_canary(ROUTE, 40, who="alice", reason="step 1")
    # the file still says 0 %, unchanged since it seeded: the live 40 % stays
    note = (await book.seed({ROUTE: SPEC}))[0]
    assert (note.outcome, note.differs) == ("unchanged", ("canary_percent",))
    # the file changed after a live change: the store wins, and says so
    edited = SPEC.model_copy(update={"shadow_percent": 5.0})
    note = (await book.seed({ROUTE: edited}))[0]
    assert note.outcome == "store_wins"
    assert (await book.get(ROUTE)).canary_percent == 40


async def test_an_edited_file_applies_when_nothing_changed_live(book: RouteBook):
    await book.seed({ROUTE: SPEC})
    edited = SPEC.model_copy(update={"canary_percent": 10.0})
    assert (await book.seed({ROUTE: edited}))[0].outcome == "file_applied"
    assert (await book.get(ROUTE)).canary_percent == 10
    assert (await book.history(ROUTE))[0].who == "config"


async def test_a_live_spec_naming_a_provider_no_longer_configured_takes_the_files(
    book: RouteBook,
):
    # Found by hand: moved to 100 % on "candidate", then the file made it the control and
    # dropped "control"'s section. The store won (changed live), still naming "control";
    # a rollback (the guard's too) then sent every new prediction to a provider no
    # process had, where it stayed "starting", unlogged.
    await book.seed({ROUTE: SPEC}, ["control", "candidate"])
    await _control(book).set_canary(ROUTE, 100, who="alice", reason="moved")
    after = RouteSpec(provider="candidate")
    note = (await book.seed({ROUTE: after}, ["candidate"]))[0]
    assert (note.outcome, note.gone) == ("file_applied", ("control",))
    assert await book.get(ROUTE) == after
    assert (await book.history(ROUTE))[0].reason == (
        "the store's spec named provider(s) control, no longer configured")
    await book.seed({ROUTE: after}, ["candidate"])  # no longer changed live: unchanged
    assert (await book.seed({ROUTE: after}, ["candidate"]))[0].outcome == "unchanged"


async def test_every_change_is_audited_and_moves_the_version(book: RouteBook):
    await book.seed({ROUTE: SPEC})
    control = _control(book)
    first = await book.version()
    entry = await control.set_canary(ROUTE, "50", who="alice", reason="half")
    assert await book.version() > first
    back = await control.rollback(ROUTE, who="cli", reason="errors up")
    history = await book.history(ROUTE)
    assert [(h.who, h.action, h.reason) for h in history[:2]] == [
        ("cli", "rollback", "errors up"),
        ("alice", "set-canary", "half"),
    ]
    assert entry.before["canary_percent"] == 0 and entry.after["canary_percent"] == 50
    assert back.after["canary_percent"] == 0
    shown = await control.describe(ROUTE)
    assert shown["changes"][0]["reason"] == "errors up"
    assert set(shown["arms"]) == {"control", "candidate"}


@pytest.mark.parametrize(
    ("key", "update", "error"),
    [
        ("acme/nope", {"canary_percent": 5}, NotFound),
        (ROUTE, {"canary_percent": 101}, ContractViolation),
        (ROUTE, {"canary_percent": -1}, ContractViolation),
        (ROUTE, {"guard": {"max_error_rate": 7}}, ContractViolation),
        (ROUTE, {"guard": {}}, ContractViolation),
        (ROUTE, {"candidate": "elsewhere"}, ContractViolation),
        (ROUTE, {"shadow_policy": {"where": [{"field": "x", "op": "lt", "value": "a"}]}},
         ContractViolation),
        (ROUTE, {"colour": "blue"}, ContractViolation),
        (ROUTE, {"shadow_percent": 10}, ContractViolation),  # no shadow_policy
    ],
)
async def test_bad_changes_are_refused_and_change_nothing(book, key, update, error):
    await book.seed({ROUTE: SPEC})
    before = (await book.version(), await book.get(ROUTE))
    with pytest.raises(error):
        await _control(book).change(key, update, who="alice", reason="try")
    assert (await book.version(), await book.get(ROUTE)) == before


async def test_shadowing_without_a_policy_is_refused_and_changes_nothing(book: RouteBook):
    policed = SPEC.model_copy(update={"shadow_policy": ShadowPolicy(allow_fields=["prompt"])})
    await book.seed({ROUTE: policed})
    await _control(book).set_shadow(ROUTE, 10, who="alice", reason="compare")
    before = (await book.version(), await book.get(ROUTE))
    with pytest.raises(ContractViolation, match="needs a shadow_policy"):
        await _control(book).change(ROUTE, {"shadow_policy": None}, who="alice", reason="r")
    assert (await book.version(), await book.get(ROUTE)) == before
    await _control(book).set_shadow(ROUTE, 0, who="alice", reason="stop")
    await _control(book).change(ROUTE, {"shadow_policy": None}, who="alice", reason="r")


async def test_a_change_needs_a_reason(book: RouteBook):
    await book.seed({ROUTE: SPEC})
    with pytest.raises(ContractViolation, match="reason"):
        await _control(book).set_canary(ROUTE, 5, who="alice", reason="  ")
    # float() read "1_0" as 10 and "٣" (Arabic-Indic three) as 3
    for bad in ("101", "-1", "nan", "half", True, "1_0", "\u0663", "10%"):
        with pytest.raises(ContractViolation):
            await _control(book).set_canary(ROUTE, bad, who="alice", reason="r")
