"""Persistence: session documents, runs (one per turn), the append-only event log, tokens."""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models


class StoredSession(models.Model):
    """A session document, revision-checked (see :mod:`picoflow_web.store`)."""

    id = models.CharField(primary_key=True, max_length=64)
    flow = models.CharField(max_length=200, db_index=True)
    revision = models.IntegerField()
    run_status = models.CharField(max_length=16)
    doc = models.JSONField()
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("-updated",)

    def __str__(self) -> str:
        return f"{self.flow} session {self.id}"


class Run(models.Model):
    """The recorded events of one turn."""

    class Status(models.TextChoices):
        RUNNING = "running"
        FINISHED = "finished"
        FAILED = "failed"

    id = models.CharField(primary_key=True, max_length=64)
    flow = models.CharField(max_length=200, db_index=True)
    session_id = models.CharField(max_length=64, db_index=True, blank=True)
    message = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING,
                              db_index=True)
    reply = models.JSONField(null=True, blank=True)
    has_conflicts = models.BooleanField(default=False, db_index=True)
    event_count = models.IntegerField(default=0)
    branch_count = models.IntegerField(default=0)
    started_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL)
    started_at = models.DateTimeField(auto_now_add=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-started_at",)

    def __str__(self) -> str:
        return f"{self.flow} run {self.id}"

    def summary(self) -> dict[str, object]:
        """The JSON the runs list shows."""
        return {
            "id": self.id, "flow": self.flow, "session_id": self.session_id,
            "message": self.message, "status": self.status, "reply": self.reply,
            "has_conflicts": self.has_conflicts, "event_count": self.event_count,
            "branch_count": self.branch_count,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
        }


class EventRecord(models.Model):
    """One event of a run, stored as the runtime emitted it."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    seq = models.IntegerField()
    type = models.CharField(max_length=40)
    path = models.CharField(max_length=400, blank=True)
    payload = models.JSONField()

    class Meta:
        ordering = ("run", "seq")
        constraints = (
            models.UniqueConstraint(fields=("run", "seq"), name="event_seq_unique_per_run"),
        )

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.type}"


class ApiToken(models.Model):
    """A bearer token for the HTTP API; only its hash is stored."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    name = models.CharField(max_length=100)
    digest = models.CharField(max_length=64, unique=True)
    created = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.user})"

    @staticmethod
    def hash(raw: str) -> str:
        """The stored digest of a raw token."""
        return hashlib.sha256(raw.encode()).hexdigest()

    @classmethod
    def issue(cls, user: object, name: str) -> tuple[ApiToken, str]:
        """Create a token; the raw value is returned once and never stored."""
        raw = "pf_" + secrets.token_urlsafe(32)
        token = cls.objects.create(user=user, name=name, digest=cls.hash(raw))
        return token, raw
