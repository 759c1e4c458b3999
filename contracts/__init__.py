"""Contracts: pydantic models of the Replicate wire format, the internal job and its
lifecycle, provider snapshots, and the one error tree. No I/O; everything imports it."""

from contracts import errors, job, replicate, snapshot

__all__ = ["errors", "job", "replicate", "snapshot"]
