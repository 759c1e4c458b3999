"""The prediction service: what the Replicate-compatible endpoints do, without HTTP.

Handlers parse requests into contracts and call this; it routes, stores, waits and
cancels (docs/replicate-api.md §2, §3). The job row is committed before anything is sent
to a provider; the dispatcher is then woken.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import orjson

from contracts.auth import DEFAULT_TENANT
from contracts.errors import Conflict, ContractViolation, NotFound
from contracts.job import Job
from contracts.replicate import CreatePrediction
from gateway import ids, validation, wire
from gateway.bodies import CurrentBodies, FinishedBodies
from gateway.clock import SYSTEM_CLOCK, Clock
from gateway.createheaders import MIN_CANCEL_AFTER_S, parse_cancel_after, parse_prefer_wait
from gateway.legacy.adoption import Adopter
from gateway.metrics import Metrics
from gateway.notify import LoopName, Notifier
from gateway.rollout import shadowgate
from gateway.rollout.router import Caller, Router
from gateway.rollout.spec import HIDDEN_ARMS
from gateway.store.creates import CreateBatcher
from gateway.store.jobs import JobStore, NewJob
from gateway.store.reader import JobReader
from gateway.webhooks import ssrf

__all__ = ["MIN_CANCEL_AFTER_S", "PAGE_SIZE", "CreateOptions", "Page", "PredictionService",
           "parse_cancel_after", "parse_prefer_wait"]

PAGE_SIZE = 100


@dataclass(frozen=True)
class CreateOptions:
    """The headers of a create request, parsed.

    ``idempotency_key`` is the key as the app sent it; ``idempotency_scope`` names who sent
    it (a digest of the API token), so that two tokens never share a key. ``token`` and
    ``headers`` identify the caller for the sticky canary (docs/canary.md); ``tenant`` is
    that token's tenant, stored with the prediction (docs/security.md).
    """

    idempotency_key: str | None = None
    idempotency_scope: str = ""
    wait_s: float | None = None
    cancel_after_s: float | None = None
    token_name: str | None = None
    token: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    tenant: str = DEFAULT_TENANT

    @property
    def stored_idempotency_key(self) -> str | None:
        """The key as the store keeps it, ``<scope>:<key>``; None without a key."""
        if self.idempotency_key is None:
            return None
        return f"{self.idempotency_scope}:{self.idempotency_key}"


@dataclass(frozen=True)
class Page:
    """One page of predictions and the absolute URLs of its neighbours."""

    jobs: list[Job]
    next_url: str | None
    previous_url: str | None


class PredictionService:
    """Create, read, list, cancel and wait on predictions.

    Reads, lists and cancels take the caller's ``tenant``: another tenant's prediction
    does not exist for it (``NotFound``, as an unknown id); None (operators) sees every
    tenant's. ``stream_secrets`` maps a tenant to the secret its stream URLs are signed
    with (``stream_secret`` is ``default``'s; a tenant without one gets no stream URL).
    """

    def __init__(
        self,
        *,
        store: JobStore,
        router: Router,
        refresh_routes: Callable[[], Awaitable[None]],
        notifier: Notifier,
        webhook_policy: ssrf.WebhookTargetPolicy,
        public_url: str,
        reader: JobReader | None = None,
        bodies: FinishedBodies | None = None,
        schemas: validation.Schemas | None = None,
        stream_secret: str = "",
        stream_secrets: Mapping[str, str] | None = None,
        keep_finished_bodies: bool = True,
        clock: Clock = SYSTEM_CLOCK,
        metrics: Metrics | None = None,
        adopter: Adopter | None = None,
    ) -> None:
        self._metrics = metrics
        self._store = store
        self._adopter = adopter  # ids the legacy provider started (docs/cutover-day.md)
        self._reader = reader or JobReader(store)
        self._creates = CreateBatcher(store, clock=clock)
        self._bodies = bodies if bodies is not None else FinishedBodies()
        self._current = CurrentBodies()  # by row version (gateway/bodies.py)
        self._keep_bodies = keep_finished_bodies  # else data_removed (docs/retention.md)
        self._router = router
        self._refresh_routes = refresh_routes
        self._notifier = notifier
        self._policy = webhook_policy
        self._public_url = public_url
        self._schemas = schemas
        self._stream_secrets = {DEFAULT_TENANT: stream_secret, **(stream_secrets or {})}
        self._clock = clock

    async def create(
        self, request: CreatePrediction, options: CreateOptions, target: str
    ) -> tuple[Job, bool]:
        """Route and store a new prediction; ``(job, created)``.

        ``target`` names the endpoint. It, the body and the ``Cancel-After`` deadline make
        the idempotency fingerprint: the same key with any of them different is a conflict.

        Raises
        ------
        NotFound
            No route serves the model, version or deployment.
        InputInvalid
            ``input`` does not match the route's model schema (422 naming each field).
        ContractViolation
            The webhook target is refused (SSRF guard) or a header is malformed.
        Conflict
            The idempotency key was used for another request.
        """
        _check_carriable(request)
        key = options.stored_idempotency_key
        fingerprint = None
        if key is not None:
            fingerprint = _fingerprint(target, request, options.cancel_after_s)
            try:
                existing = await self._store.find_idempotent(key, fingerprint)
            except Conflict:
                raise _reused_key(options) from None
            if existing is not None:
                return existing, False
        job_id = ids.new_prediction_id()
        await self._refresh_routes()  # live route changes (gateway.rollout.sync)
        tenant = options.tenant
        routed = self._router.resolve(request, job_id, tenant=tenant)
        checked = (await self._schemas.check(routed.route, request.input, job_id)  # before rows
                   if self._schemas is not None else validation.CheckedInput(request.input))
        caller = Caller(options.token, options.headers)
        routed = self._router.resolve(request, job_id, caller, tenant=tenant)
        webhook, events = request.webhook, request.webhook_events_filter
        if webhook is not None:
            await self._policy.check_url(webhook)
        now = self._clock.now()
        deadline = (
            now + timedelta(seconds=options.cancel_after_s) if options.cancel_after_s else None
        )
        new = NewJob(
            id=job_id,
            model=routed.model,
            version=routed.version,
            deployment=routed.deployment,
            route=routed.key,
            provider=routed.provider,
            target=routed.target,
            input=checked.input,
            logs=checked.note,
            callback_token=ids.callback_token(),
            webhook=webhook,
            webhook_events_filter=events,
            deadline=deadline,
            stream=request.stream,
            idempotency_key=key,
            request_hash=fingerprint,
            created_at=now,
            owner=options.token_name,
            tenant=tenant,
            priority=routed.route.priority,
            arm=routed.arm,
        )
        shadow = shadowgate.shadow_job(routed, new)
        try:
            job, created = await self._creates.create(new, shadow)
        except Conflict:
            raise _reused_key(options) from None
        skipped = shadow.skipped if shadow is not None else None
        if created and skipped and self._metrics is not None:
            self._metrics.shadow_skips.labels(new.route, shadowgate.skip_reason(skipped)).inc()
        if created:  # the reaper ends them then, if still active (or still waiting)
            self._notifier.wake(LoopName.DISPATCHER)
            for at in (deadline, shadowgate.drop_at(routed, shadow)
                       if shadow is not None and not skipped else None):
                if at is not None:
                    self._notifier.due(LoopName.REAPER, at)
        return job, created

    async def wait(self, job: Job, wait_s: float) -> Job:
        """The job once terminal, or as it stands after ``wait_s`` seconds.

        The store is read only when the watcher (:mod:`gateway.watch`) saw the job finish
        in another process; changes made here arrive with the job itself. Many waiting
        requests cost one batched query per watcher round, not one query each.
        """
        deadline = self._clock.now() + timedelta(seconds=wait_s)
        while not job.state.terminal:
            left = (deadline - self._clock.now()).total_seconds()
            if left <= 0:
                break
            woken, changed = await self._notifier.wait_job(job.id, left)
            if not woken:
                break
            job = changed if changed is not None else await self._reader.get(job.id)
        return job

    async def get(self, job_id: str, tenant: str | None = None) -> Job:
        """The job; ``NotFound`` for an unknown or malformed id, or another tenant's. An
        unknown one is looked up at the legacy provider first, if any, and adopted for
        ``tenant`` when found (docs/cutover-day.md)."""
        if not ids.PREDICTION_ID_RE.match(job_id):
            raise NotFound(f"prediction {job_id!r} does not exist")
        try:
            job = await self._reader.get(job_id)
        except NotFound:
            if self._adopter is None:
                raise
            job = await self._adopter.adopt(job_id, tenant or DEFAULT_TENANT)
        if job.arm in HIDDEN_ARMS:  # shadows are the operators' business, never the app's
            raise NotFound(f"prediction {job_id!r} does not exist")
        if tenant is not None and job.tenant != tenant:  # never a 403: no hint it exists
            raise NotFound(f"prediction {job_id!r} does not exist")
        return job

    async def get_json(self, job_id: str, tenant: str | None = None) -> bytes:
        """The prediction's JSON bytes (``NotFound`` as :meth:`get`): a finished one's
        from :mod:`gateway.bodies` without a read (kept per tenant); else one small read of
        the row's version, tenant and arm, and the bytes made from that version again, the
        row read and rendered only when changed (docs/lifecycle.md, "Reads of a prediction")."""
        key = _body_key(tenant or DEFAULT_TENANT, job_id)
        kept = self._bodies.get(key) if self._keep_bodies else None
        if kept is not None:
            return kept
        if not ids.PREDICTION_ID_RE.match(job_id):
            raise NotFound(f"prediction {job_id!r} does not exist")
        found = self._reader.known_version(job_id) or await self._reader.version(job_id)
        if found is None:  # unknown here: the legacy provider's, maybe (get adopts it)
            return self.render(await self.get(job_id, tenant))
        version, owner, arm = found
        if arm in HIDDEN_ARMS or (tenant is not None and owner != tenant):
            raise NotFound(f"prediction {job_id!r} does not exist")
        key = _body_key(owner, job_id)
        kept = self._current.get(key, version)
        if kept is not None:
            return kept
        current = await self._reader.current(job_id)  # tenant and arm never change
        if current is None:
            raise NotFound(f"prediction {job_id!r} does not exist")
        job, version = current
        body = self.render(job)
        if not (job.state.terminal and self._keep_bodies):  # else kept in self._bodies
            self._current.put(key, version, body)
        return body

    async def cancel(self, job_id: str, tenant: str | None = None) -> Job:
        """Request a cancel (idempotent); a finished prediction is returned unchanged;
        ``NotFound`` as :meth:`get`."""
        job = await self.get(job_id, tenant)
        if job.state.terminal:
            return job
        job = await self._store.request_cancel(job_id)
        self._notifier.wake(LoopName.REAPER)
        self._notifier.wake(LoopName.DISPATCHER)  # a maybe-submitted job's resubmit
        return job

    async def page(
        self,
        cursor: str | None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        tenant: str | None = None,
    ) -> Page:
        """One page of ``tenant``'s predictions (None: every tenant's), newest first
        (§2.5); cursors are opaque.

        The ``created_after``/``created_before`` filters are carried into the ``next``
        and ``previous`` URLs, so following them stays inside the filtered set.
        """
        direction, position = ids.decode_cursor(cursor) if cursor else ("next", None)
        kwargs: dict[str, Any] = {
            "created_after": created_after,
            "created_before": created_before,
            "limit": PAGE_SIZE + 1,
            "tenant": tenant,
        }
        kwargs["after" if direction == "prev" else "before"] = position
        found = await self._reader.page(**kwargs)
        if direction == "prev":
            more_newer = len(found) > PAGE_SIZE
            found = found[-PAGE_SIZE:] if more_newer else found
            more_older = True
        else:
            more_older = len(found) > PAGE_SIZE
            found = found[:PAGE_SIZE]
            more_newer = position is not None
        bounds = {"created_after": created_after, "created_before": created_before}
        filters = {name: wire.timestamp(at) for name, at in bounds.items() if at is not None}
        next_url = self._page_url("next", found[-1], filters) if found and more_older else None
        prev_url = self._page_url("prev", found[0], filters) if found and more_newer else None
        return Page(jobs=found, next_url=next_url, previous_url=prev_url)

    def _page_url(self, direction: str, job: Job, filters: dict[str, str | None]) -> str:
        token = ids.list_cursor(direction, job.created_at, job.id)
        return f"{self._public_url}/v1/predictions?{urlencode({'cursor': token, **filters})}"

    def prediction(self, job: Job, *, status: str | None = None) -> dict[str, Any]:
        """The wire form of ``job``."""
        secret = self._stream_secrets.get(job.tenant)
        return wire.body(job, self._public_url, status=status, stream_secret=secret)

    def render(self, job: Job) -> bytes:
        """The JSON bytes of ``job`` as GET shows it; a finished job's are made once."""
        secret = self._stream_secrets.get(job.tenant)
        if not job.state.terminal or not self._keep_bodies:
            return wire.prediction_json(job, self._public_url, stream_secret=secret)
        key = _body_key(job.tenant, job.id)
        kept = self._bodies.get(key)
        if kept is None:
            kept = wire.prediction_json(job, self._public_url, stream_secret=secret)
            self._bodies.put(key, kept)
        return kept


def _body_key(tenant: str, job_id: str) -> str:
    """A finished body's key in :mod:`gateway.bodies`: its id, prefixed by its tenant
    unless ``default``, so a GET of another tenant's id never finds it there."""
    return job_id if tenant == DEFAULT_TENANT else f"{tenant}/{job_id}"


def _fingerprint(target: str, request: CreatePrediction, cancel_after_s: float | None) -> str:
    fields = {"target": target, **request.model_dump(mode="json")}
    if cancel_after_s is not None:  # absent otherwise, so older fingerprints still match
        fields["cancel_after_s"] = cancel_after_s
    body = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(body.encode()).hexdigest()


_ONLY_JSON = (orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS  # orjson
              | orjson.OPT_PASSTHROUGH_SUBCLASS)  # refuses these non-JSON values too


def _check_carriable(request: CreatePrediction) -> None:
    """Refuse an input that outbound webhooks could not carry (an integer no double can
    hold, such as ``10**309`` written out in full): it would end no prediction otherwise.

    orjson first (a microsecond, the webhook encoder tens): no ``null`` in its output means
    no integer beyond 64 bits and no NaN or infinity; otherwise the webhook encoder decides.

    Raises
    ------
    ContractViolation
        The input cannot be written as the JSON the gateway sends.
    """
    try:
        if b"null" not in orjson.dumps(request.input, option=_ONLY_JSON):
            return
    except (TypeError, orjson.JSONEncodeError):
        pass
    try:
        wire.compact_json(request.input)
    except (ValueError, TypeError) as exc:
        raise ContractViolation(f"input cannot be carried in JSON: {exc}") from None


def _reused_key(options: CreateOptions) -> Conflict:
    """The 409 for a key reused with another request (naming the key as the app sent it)."""
    return Conflict(
        f"Idempotency-Key {options.idempotency_key!r} was already used with a different "
        "request (body, endpoint or Cancel-After); use a new key for a new prediction"
    )

