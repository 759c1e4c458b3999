"""The store: the only home of SQL and the only importer of SQLAlchemy.

``db`` (the engine, migrations), ``schema`` (tables), ``jobs``, ``claims`` and
``dispatching`` (the job store: guarded transitions, the queue of leases and cancels, the
dispatcher's claim), ``creates`` (new jobs committed in groups), ``records`` (what it
takes and returns), ``ordering`` (when a snapshot is older than the job), ``errors``
(transient or refused), ``outbox`` (webhook events written inside a job's transaction),
``events`` (provider events), ``deliveries`` and ``deadletters`` (outbox rows on their way
out, and back), ``secrets`` (generated secrets), ``lease`` (the one claim helper),
``migrations`` (alembic). Nothing outside this package receives a connection or runs a
statement; the composition root (:mod:`gateway.app`, :mod:`gateway.cli`) creates the
engine and hands it to the classes here.

Nothing moves a job backwards: its state only ranks up (creating 0, queued 1, running 2,
terminal 3), and a non-terminal snapshot older than what the job holds (a lower state, a
strict prefix of its output list or of its logs: :func:`ordering.moves_back`) writes none of
state, output, logs or raw status (docs/lifecycle.md, "Ordering").

Every statement that changes a job names the states it may move from
(:class:`jobs.JobStore` and its queue half :class:`claims.Claims`):

=================  =============================  ===========  ================================
method             from (guard)                   to           columns written
=================  =============================  ===========  ================================
create             (new row)                      creating     every column
claim_dispatch     creating, queued; unsubmitted, -            lease_owner, leased_until
                   due, no cancel, not leased;
                   under max_concurrency
claim_fetch        active; submitted, due, not    -            lease_owner, leased_until
                   leased
applying           active; this process's lease   -            lease (an apply's own token,
                   (the reaper's: none held); no                until it ends or fails)
                   unprocessed provider event
                   (unless told otherwise)
release            active; this process's lease   -            lease, next_attempt_at
postpone_check     active; submitted              -            next_attempt_at
mark_lost          active; lost_at unset          -            lost_at
mark_found         active; lost_at set            -            lost_at (unset)
mark_submitted     active                         queued,      provider_job_id, submitted_at,
                                                  running      next_attempt_at, lease, and
                                                  (forward)    apply_progress's columns
                   terminal; provider id unset    -            provider_job_id, submitted_at
defer              creating, queued               queued       raw_status, attempts,
                                                               next_attempt_at, lease
apply_progress     active; snapshot not older     forward      raw_status, state, started_at,
                                                  only         output, logs
finish             active                         completed,   state, raw_status, error,
                                                  failed,      metrics, output, logs,
                                                  canceled     completed_at, started_at,
                                                               next_attempt_at, lease; assets;
                                                               provider_job_id if unset
request_cancel     active; no cancel requested    -            cancel_requested_at;
                                                               next_attempt_at (unsubmitted,
                                                               maybe submitted: due now)
claim_cancels      active; submitted; cancel due, -            cancel_sent_at
                   not sent since resend_before
mark_cancel_sent   active                         -            cancel_sent_at
=================  =============================  ===========  ================================

Every row also gets ``updated_at``; "active" is creating, queued or running.
"""
