"""The Django admin: projects, memberships and tokens managed; runs, sessions and events
read-only (they are written by turns and ingest only).

Staff who are not superusers see (and, with the model permissions Django grants them,
manage) only the projects they are ``admin`` of, and those projects' memberships and
tokens. Tokens are created with ``manage.py create_api_token`` or on the Tokens page
(:mod:`picoflow_web.http.tokens_page`), which show the value once (the admin cannot do that
safely); here they are listed and revoked.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from picoflow_web.models import (
    ApiToken,
    EventRecord,
    Membership,
    Project,
    Run,
    StoredSession,
)


def _administered(request: HttpRequest) -> QuerySet[Any] | None:
    """Names of the projects the user administers; None for a superuser (all)."""
    user: Any = request.user
    if user.is_superuser:
        return None
    return Membership.objects.filter(user_id=user.pk, role=Membership.Role.ADMIN).values(
        "project_id")


# The admin classes are generic in django-stubs only: at run time they take no parameters.
class _ProjectScoped(admin.ModelAdmin):  # type: ignore[type-arg]
    project_field = "project"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        rows = super().get_queryset(request)
        mine = _administered(request)
        return rows if mine is None else rows.filter(**{f"{self.project_field}__in": mine})


class MembershipInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Membership
    extra = 1
    autocomplete_fields = ("user",)


@admin.register(Project)
class ProjectAdmin(_ProjectScoped):
    project_field = "name"
    list_display = ("name", "created")
    search_fields = ("name",)
    inlines = (MembershipInline,)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        return ("name",) if obj is not None else ()  # the name is the key: it never changes


@admin.register(Membership)
class MembershipAdmin(_ProjectScoped):
    list_display = ("project", "user", "role")
    list_filter = ("role", "project")
    search_fields = ("user__username", "project__name")
    autocomplete_fields = ("user",)


@admin.action(description="Revoke the selected tokens")
def revoke(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Any]) -> None:
    queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now(),
                                                    revoked_reason="revoked")


@admin.register(ApiToken)
class ApiTokenAdmin(_ProjectScoped):
    list_display = ("name", "user", "project", "scopes", "created", "expires_at",
                    "revoked_at", "last_used_at")
    list_filter = ("project", "revoked_at")
    search_fields = ("name", "user__username")
    actions = (revoke,)
    fields = ("name", "user", "project", "scopes", "created", "expires_at", "revoked_at",
              "revoked_reason", "last_used_at")
    readonly_fields = ("name", "user", "project", "scopes", "created", "revoked_at",
                       "revoked_reason", "last_used_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


class _ReadOnly(admin.ModelAdmin):  # type: ignore[type-arg]
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Run)
class RunAdmin(_ReadOnly, _ProjectScoped):
    list_display = ("id", "flow", "project", "status", "session_id", "started_at", "worker")
    list_filter = ("status", "project", "flow")
    search_fields = ("id", "session_id")


@admin.register(StoredSession)
class StoredSessionAdmin(_ReadOnly, _ProjectScoped):
    list_display = ("id", "flow", "project", "run_status", "revision", "updated")
    list_filter = ("project", "flow")
    search_fields = ("id",)


@admin.register(EventRecord)
class EventRecordAdmin(_ReadOnly, _ProjectScoped):
    project_field = "run__project"
    list_display = ("run", "seq", "type", "path")
    list_filter = ("type",)
    search_fields = ("run__id",)
    list_select_related = ("run",)
