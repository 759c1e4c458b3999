"""Contracts: pydantic models of the Replicate wire format, the internal job and its
lifecycle, provider snapshots, and the one error tree. No I/O; everything imports it."""

from contracts import auth, errors, job, replicate, snapshot, times

__all__ = ["auth", "errors", "job", "replicate", "snapshot", "times"]
