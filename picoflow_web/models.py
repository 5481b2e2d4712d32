"""Persistence: projects and their members, session documents, runs (one per turn), the
append-only event log, tokens."""

from __future__ import annotations

import hashlib
import json
import secrets
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

DEFAULT_PROJECT = "default"
"""The project rows without one go to (and the first user administers)."""


class Project(models.Model):
    """Who may see and do what: every run and session belongs to one project."""

    name = models.SlugField(max_length=50, primary_key=True)
    """Also the key (a run's ``project_id`` is its project's name, so a run summary needs
    no query) and part of a channel-layer group name, hence a slug; it cannot change."""
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name


def default_project_id() -> str:
    """The ``default`` project's id, made if missing: rows created without a project (and
    the rows that existed before projects) belong to it."""
    return Project.objects.get_or_create(name=DEFAULT_PROJECT)[0].pk


class Membership(models.Model):
    """A user's role in a project."""

    class Role(models.TextChoices):
        VIEWER = "viewer"
        """Reads runs, events and sessions."""
        OPERATOR = "operator"
        """Also starts and stops runs, continues and ends sessions, ingests events."""
        ADMIN = "admin"
        """Also manages the project's members and tokens."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="picoflow_memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)

    class Meta:
        ordering = ("project", "user")
        constraints = (
            models.UniqueConstraint(fields=("project", "user"), name="one_role_per_project"),
        )

    def __str__(self) -> str:
        return f"{self.user} ({self.role}) in {self.project}"


class TrustedJSONField(models.JSONField):
    """JSON kept as the text it was written as: a ``text`` column on every database.

    Every writer has checked the text already: the event log is appended to only by
    :func:`picoflow_web.data.eventlog.insert_rows`, with text that the runtime's schema
    serialised, or that ingest and import validated line by line against it; a session
    document is the runtime's own model, dumped. So SQLite's ``JSON_VALID`` check and
    PostgreSQL's ``jsonb`` (measured: half of a row's cost in a ``COPY``) each parsed every
    stored event a second time, and ``jsonb`` gave back its own rendering instead of the
    text that was stored, and refused the ``\\u0000`` escape of a NUL character. Nothing
    queries inside such a column.
    """

    def db_type(self, connection: Any) -> str | None:
        return "text" if connection.vendor == "postgresql" else super().db_type(connection)

    def db_check(self, connection: Any) -> str | None:
        return None if connection.vendor == "sqlite" else super().db_check(connection)

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if connection.vendor != "postgresql":
            return super().get_db_prep_value(value, connection, prepared)
        # Text, not psycopg's Jsonb (a jsonb value does not go into a text column).
        value = value if prepared else self.get_prep_value(value)
        return json.dumps(value, cls=self.encoder)


class StoredSession(models.Model):
    """A session document, revision-checked (see :mod:`picoflow_web.data.documents`)."""

    id = models.CharField(primary_key=True, max_length=64)
    flow = models.CharField(max_length=200, db_index=True)
    revision = models.IntegerField()
    run_status = models.CharField(max_length=16)
    doc = TrustedJSONField()
    """A text column on PostgreSQL too: ``jsonb`` refuses the ``\\u0000`` escape of a NUL
    character that state may hold."""
    project = models.ForeignKey(Project, on_delete=models.PROTECT, default=default_project_id,
                                related_name="sessions")
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("-updated",)

    def __str__(self) -> str:
        return f"{self.flow} session {self.id}"


class LedgerTurn(models.Model):
    """The ledgered turn of a session (at most one): what ``FlowEngine.resume`` runs again
    (see :mod:`runtime.barrier.ledger` and :mod:`picoflow_web.data.documents`)."""

    session_id = models.CharField(primary_key=True, max_length=64)
    turn_id = models.CharField(max_length=64)
    record = models.TextField()
    """The runtime's ``LedgerTurn`` as JSON text (redacted like the session document)."""
    project = models.ForeignKey(Project, on_delete=models.CASCADE, default=default_project_id,
                                related_name="ledger_turns")
    created = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"ledger of session {self.session_id} (turn {self.turn_id})"


class LedgerEntry(models.Model):
    """One fulfilled branch of a ledgered barrier (a ``runtime.barrier.LedgerEntry``)."""

    session_id = models.CharField(max_length=64)
    turn_id = models.CharField(max_length=64)
    barrier = models.TextField()
    key = models.TextField()
    entry = models.TextField()
    """The entry as JSON text (redacted like the session document)."""

    class Meta:
        constraints = (
            models.UniqueConstraint(fields=("session_id", "turn_id", "barrier", "key"),
                                    name="one_ledger_entry_per_branch"),
        )
        indexes = (models.Index(fields=("session_id", "turn_id"), name="ledger_entry_turn"),)

    def __str__(self) -> str:
        return f"ledger entry {self.barrier}/{self.key} of session {self.session_id}"


class Run(models.Model):
    """The recorded events of one turn."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        """Enqueued; no worker has taken it yet."""
        RUNNING = "running"
        FINISHED = "finished"
        FAILED = "failed"
        INTERRUPTED = "interrupted"
        """The executor stopped reporting before the turn ended (a remote process that
        died or lost its connection, a worker whose lease expired)."""
        CANCELLED = "cancelled"
        """Stopped on request (``POST /api/runs/<id>/cancel``), queued or running."""

    ENDED = frozenset({"finished", "failed", "interrupted", "cancelled"})
    """Statuses a run never leaves."""

    id = models.CharField(primary_key=True, max_length=64)
    flow = models.CharField(max_length=200, db_index=True)
    project = models.ForeignKey(Project, on_delete=models.PROTECT, default=default_project_id,
                                related_name="runs")
    session_id = models.CharField(max_length=64, db_index=True, blank=True)
    message = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING,
                              db_index=True)
    reply = models.JSONField(null=True, blank=True)
    has_conflicts = models.BooleanField(default=False, db_index=True)
    event_count = models.IntegerField(default=0)
    branch_count = models.IntegerField(default=0)
    rejected_count = models.IntegerField(default=0, db_index=True)
    """Branches rejected (failed, timed out or cancelled): with has_conflicts, what makes
    a run worth debugging."""
    duration = models.FloatField(null=True, blank=True)
    """Seconds of the turn as its events tell it (the greatest offset, as the run page
    shows it), not the time since the run was queued."""
    started_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL)
    started_at = models.DateTimeField(auto_now_add=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    origin: models.JSONField[dict[str, Any], dict[str, Any]] = models.JSONField(
        default=dict, blank=True)
    """Where the turn executed: ``{"kind": "worker"}`` for a run one of the dashboard's
    workers executes (see :attr:`worker`), ``{"kind": "remote", "host": ..., "pid": ...}``
    for one shipped to ingest, ``{"kind": "import", "by": ..., "copy_of": ...}`` for one
    read from an exported file; ``{}`` for runs recorded before workers existed."""
    last_seen_at = models.DateTimeField(null=True, blank=True, db_index=True)
    """When a remote run last sent events or a heartbeat."""
    last_seq = models.IntegerField(default=-1)
    """The last stored ``seq`` of a remote run (a sink's reported loss leaves gaps, so it is
    not ``event_count - 1``)."""
    interruption = models.JSONField(null=True, blank=True)
    """``{"reason", "silent_for"}`` of an interrupted run (its ``run.interrupted``)."""
    config = models.JSONField(null=True, blank=True)
    """The config the turn was started with (checked against the flow's schema)."""
    worker = models.CharField(max_length=100, blank=True)
    """The worker executing (or that executed) the run."""
    lease_expires_at = models.DateTimeField(null=True, blank=True, db_index=True)
    """Until when the worker's lease on the run holds; it renews it while the turn runs."""
    cancel_requested = models.JSONField(null=True, blank=True)
    """``{"by", "at"}`` once someone asked the run to stop."""
    generation = models.PositiveIntegerField(default=0)
    """How many times the run's events were replaced (a trace's run derived again from its
    spans): a page that folded events of another generation starts the run over."""

    class Meta:
        ordering = ("-started_at",)

    def __str__(self) -> str:
        return f"{self.flow} run {self.id}"

    def summary(self) -> dict[str, object]:
        """The JSON the runs list shows."""
        return {
            "id": self.id, "flow": self.flow, "project": self.project_id,
            "session_id": self.session_id,
            "message": self.message, "status": self.status, "reply": self.reply,
            "has_conflicts": self.has_conflicts, "event_count": self.event_count,
            "branch_count": self.branch_count, "rejected_count": self.rejected_count,
            "duration": self.duration,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "origin": self.origin_info(),
            "interruption": self.interruption,
            "worker": self.worker or None,
            "cancel_requested": self.cancel_requested,
            "generation": self.generation,
        }

    @property
    def is_remote(self) -> bool:
        """Whether the run was shipped from another process (through ingest)."""
        return self.origin.get("kind") == "remote"

    @property
    def in_worker(self) -> bool:
        """Whether one of the dashboard's workers executes the run."""
        return self.origin.get("kind") == "worker"

    @property
    def is_imported(self) -> bool:
        """Whether the run was read from an exported file (``POST /api/import``)."""
        return self.origin.get("kind") == "import"

    def origin_info(self) -> dict[str, object]:
        """The origin with a label for pages: ``worker <id>``, ``host (pid N)`` (``<source>
        on host (pid N)`` when the sender named what recorded the run: ``LangGraph``),
        ``imported`` (``imported as a copy of <id>``) or ``server``."""
        if self.is_imported:
            copy_of = self.origin.get("copy_of")
            label = f"imported as a copy of {copy_of}" if copy_of else "imported"
            return {**self.origin, "label": label}
        if self.in_worker:
            worker = self.worker or None
            info: dict[str, object] = {
                "kind": "worker", "worker": worker,
                "label": f"worker {worker}" if worker else "worker (waiting for one)"}
            if isinstance(self.origin.get("coordinator"), dict):
                # A concurrent_steps() child: which coordinator run, batch and item sent it.
                info["coordinator"] = self.origin["coordinator"]
            if isinstance(self.origin.get("resumes"), str):
                info["resumes"] = self.origin["resumes"]  # POST /api/runs/<id>/resume
            return info
        if not self.is_remote:
            return {"kind": "server", "label": "server"}
        host, pid = self.origin.get("host") or "unknown host", self.origin.get("pid")
        label = f"{host} (pid {pid})" if pid is not None else str(host)
        source = self.origin.get("source")
        if source:
            label = f"{source} on {label}"
        return {**self.origin, "label": label}


# Its type parameters stay implicit: a field class is not subscriptable at run time.
class RowIdField(models.BigAutoField):  # type: ignore[type-arg]
    """A row id without SQLite's ``AUTOINCREMENT``: SQLite's own documentation advises
    against it unless ids must never be reused, and it costs every insert a write to its
    counter table. Nothing reads an event's id: events are ordered and found by
    ``(run, seq)``."""

    def db_type_suffix(self, connection: Any) -> str | None:
        # Django's Field.db_type_suffix is missing from django-stubs.
        return (None if connection.vendor == "sqlite"
                else super().db_type_suffix(connection))  # type: ignore[misc]


class EventRecord(models.Model):
    """One event of a run, stored as the runtime emitted it.

    Built for appending in bulk: no index of the run's own, as the unique ``(run, seq)``
    index leads with it and serves every lookup by run; and the two column types above.
    """

    id = RowIdField(primary_key=True)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events",
                            db_index=False)
    seq = models.IntegerField()
    type = models.CharField(max_length=40)
    path = models.CharField(max_length=400, blank=True)
    payload = TrustedJSONField()

    class Meta:
        ordering = ("run", "seq")
        constraints = (
            models.UniqueConstraint(fields=("run", "seq"), name="event_seq_unique_per_run"),
        )

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.type}"


class TraceSpan(models.Model):
    """One OpenTelemetry span received at ``POST /v1/traces``: what a trace's run is
    derived from (:mod:`picoflow_web.record.spans`). Ids in lowercase hex; times in Unix
    nanoseconds; attributes redacted before they are stored."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="spans")
    trace_id = models.CharField(max_length=32, db_index=True)
    span_id = models.CharField(max_length=16)
    parent_span_id = models.CharField(max_length=16, blank=True)
    remote_parent = models.BooleanField(default=False)
    """The parent is another process's span (OTLP's span flags)."""
    name = models.CharField(max_length=400)
    kind = models.IntegerField(default=0)
    start_ns = models.BigIntegerField()
    end_ns = models.BigIntegerField()
    status_code = models.IntegerField(default=0)
    status_message = models.TextField(blank=True)
    attributes = models.JSONField(default=dict)
    events = models.JSONField(default=list)
    """``[{"name", "time" (ns), "attributes"}]``."""
    resource = models.JSONField(default=dict)
    """The resource's attributes (``service.name``, ``host.name``, ...)."""
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = (
            models.UniqueConstraint(fields=("trace_id", "span_id"), name="span_unique_in_trace"),
        )

    def __str__(self) -> str:
        return f"{self.trace_id}/{self.span_id} {self.name}"


SCOPES = ("read", "run", "ingest")
"""What a token may do: ``read`` runs, events and sessions; ``run`` start and end turns;
``ingest`` ship events from another process (``POST /api/ingest``)."""
DEFAULT_SCOPES = "read,run"
"""What a token may do unless created with ``--scope`` (and what tokens made before scopes
existed keep)."""


def password_stamp(user: object) -> str:
    """A digest of the user's password hash: a token remembers it, and a password change
    (which changes the hash) makes the token stop working."""
    return hashlib.sha256(str(getattr(user, "password", "")).encode()).hexdigest()


class ApiToken(models.Model):
    """A bearer token for the HTTP API, bound to a user and a project; only its hash is
    stored. It acts with its scopes, never beyond the user's role in its project."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, default=default_project_id,
                                related_name="tokens")
    name = models.CharField(max_length=100)
    digest = models.CharField(max_length=64, unique=True)
    created = models.DateTimeField(auto_now_add=True)
    scopes = models.CharField(max_length=100, default=DEFAULT_SCOPES)
    """Comma-separated :data:`SCOPES`."""
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_reason = models.CharField(max_length=100, blank=True)
    user_stamp = models.CharField(max_length=64, blank=True)
    """:func:`password_stamp` of the user when the token was issued."""
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created",)

    def scope_set(self) -> frozenset[str]:
        """The token's scopes."""
        return frozenset(s for s in self.scopes.split(",") if s)

    def __str__(self) -> str:
        return f"{self.name} ({self.user})"

    def refusal(self, now: datetime | None = None) -> str | None:
        """Why the token does not work (revoked, expired, user inactive or with a new
        password), or None when it does. The user must be loaded."""
        now = now or timezone.now()
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        if not self.user.is_active:
            return "user_inactive"
        if self.user_stamp and self.user_stamp != password_stamp(self.user):
            return "password_changed"
        return None

    @staticmethod
    def hash(raw: str) -> str:
        """The stored digest of a raw token."""
        return hashlib.sha256(raw.encode()).hexdigest()

    @classmethod
    def issue(cls, user: object, name: str, scopes: tuple[str, ...] | None = None, *,
              project: Project | None = None,
              expires_at: datetime | None = None) -> tuple[ApiToken, str]:
        """Create a token; the raw value is returned once and never stored. Without a
        project it is bound to the ``default`` one."""
        chosen = scopes or tuple(DEFAULT_SCOPES.split(","))
        unknown = sorted(set(chosen) - set(SCOPES))
        if unknown:
            raise ValueError(f"Unknown scope(s) {unknown}; choose from {', '.join(SCOPES)}.")
        if project is None:
            project = Project.objects.get_or_create(name=DEFAULT_PROJECT)[0]
        raw = "pf_" + secrets.token_urlsafe(32)
        token = cls.objects.create(user=user, name=name, digest=cls.hash(raw), project=project,
                                   scopes=",".join(s for s in SCOPES if s in chosen),
                                   expires_at=expires_at, user_stamp=password_stamp(user))
        return token, raw
