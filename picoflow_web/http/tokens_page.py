"""The API tokens page: a project's admins create, list and revoke its tokens.

``/tokens/`` leads to the page of each project the user administers
(:func:`picoflow_web.data.access.administers`; superusers: every project);
``/projects/<name>/tokens/`` lists the project's tokens (name, owner, scopes, created, last
used, expiry, state) and creates one for the signed-in user. The raw value is in the answer
to the form that created it and nowhere else: only its hash is stored, and that answer is
``no-store``, so neither a reload nor the browser's cache shows it again. A member of the
project with a lesser role gets a forbidden page; anyone else a 404, as for the project's
runs. The views are synchronous (Django runs them in a thread): each step is a database
read or write.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from picoflow_web.data.access import administers
from picoflow_web.models import DEFAULT_SCOPES, SCOPES, ApiToken, Membership, Project

SCOPE_HELP = {"read": "read runs, events and sessions", "run": "start and end turns, import",
              "ingest": "ship events from another process"}


class TokenForm(forms.Form):
    """A new token: its name, scopes and, optionally, days until it expires."""

    name = forms.CharField(max_length=100, strip=True)
    scopes = forms.MultipleChoiceField(choices=[(s, s) for s in SCOPES],
                                       widget=forms.CheckboxSelectMultiple,
                                       initial=DEFAULT_SCOPES.split(","))
    expires_in = forms.IntegerField(required=False, min_value=1, max_value=3650,
                                    label="Expires in (days)")


def administered(user: Any) -> list[str]:
    """Names of the projects ``user`` manages tokens of, sorted."""
    if getattr(user, "is_superuser", False):
        return list(Project.objects.order_by("name").values_list("name", flat=True))
    return sorted(Membership.objects.filter(user_id=user.pk, role=Membership.Role.ADMIN)
                  .values_list("project_id", flat=True))


def _project_for_admin(user: Any, name: str) -> Project:
    """``name``'s project when ``user`` administers it; a forbidden page for its members
    with a lesser role, a 404 for anyone else (as its runs are)."""
    project = Project.objects.filter(name=name).first()
    if project is not None and administers(user, project):
        return project
    if project is not None and Membership.objects.filter(user_id=user.pk,
                                                         project_id=name).exists():
        raise PermissionDenied(f"Only admins of project {name!r} manage its tokens.")
    raise Http404("No such project.")


def _rows(project: Project) -> list[dict[str, Any]]:
    now = timezone.now()
    return [{"token": token, "state": token.refusal(now) or "active"}
            for token in ApiToken.objects.filter(project=project).select_related("user")]


def _page(request: HttpRequest, project: Project, form: TokenForm, *,
          created: tuple[ApiToken, str] | None = None, status: int = 200) -> HttpResponse:
    return render(request, "picoflow_web/tokens.html", {
        "project": project, "form": form, "rows": _rows(project),
        "scope_help": [(s, SCOPE_HELP[s]) for s in SCOPES],
        "created": created[0] if created else None, "raw": created[1] if created else None,
        "others": [p for p in administered(request.user) if p != project.pk],
    }, status=status)


@require_safe
@login_required
def tokens_index(request: HttpRequest) -> HttpResponse:
    """The page of the one project the user administers, or a choice among several."""
    names = administered(request.user)
    if not names:
        raise PermissionDenied("Only a project's admins manage its tokens.")
    if len(names) == 1:
        return HttpResponseRedirect(reverse("tokens", args=[names[0]]))
    return render(request, "picoflow_web/tokens.html", {"choices": names})


@never_cache  # the answer to a create carries the raw token: never kept, never replayed
@require_http_methods(["GET", "HEAD", "POST"])
@login_required
def project_tokens(request: HttpRequest, project: str) -> HttpResponse:
    """The project's tokens; a POST creates one for the user and shows its value once."""
    found = _project_for_admin(request.user, project)
    if request.method != "POST":
        return _page(request, found, TokenForm())
    form = TokenForm(request.POST)
    if not form.is_valid():
        return _page(request, found, form, status=400)
    days = form.cleaned_data["expires_in"]
    expires = timezone.now() + timedelta(days=days) if days else None
    created = ApiToken.issue(request.user, form.cleaned_data["name"],
                             tuple(form.cleaned_data["scopes"]), project=found,
                             expires_at=expires)
    return _page(request, found, TokenForm(), created=created)


@require_POST
@login_required
def revoke_token(request: HttpRequest, project: str, token_id: int) -> HttpResponse:
    """Revoke one of the project's tokens (any member's), then back to the list."""
    found = _project_for_admin(request.user, project)
    if not ApiToken.objects.filter(project=found, pk=token_id).exists():
        raise Http404("No such token.")
    ApiToken.objects.filter(project=found, pk=token_id, revoked_at__isnull=True).update(
        revoked_at=timezone.now(), revoked_reason="revoked")
    return HttpResponseRedirect(reverse("tokens", args=[found.pk]), status=303)

