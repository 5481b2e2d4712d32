"""Who may do what, in which project: roles, token scopes, and the project of a new run.

A request acts as an :class:`Access`: its user's role in each of their projects, narrowed
by a bearer token to the token's one project and its scopes. What a scope needs:
``read`` a viewer, ``run`` and ``ingest`` an operator; managing members and tokens an
admin. Superusers act as admins of every project (a superuser's token still only of its
own project). Everything another project holds is answered as if it did not exist (404):
ids of other projects' runs and sessions reveal nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from picoflow_web.errors import Forbidden, NotFound
from picoflow_web.models import DEFAULT_PROJECT, Membership, Project

ROLE_RANK: dict[str, int] = {Membership.Role.VIEWER: 1, Membership.Role.OPERATOR: 2,
                             Membership.Role.ADMIN: 3}
SCOPE_ROLE = {"read": Membership.Role.VIEWER, "run": Membership.Role.OPERATOR,
              "ingest": Membership.Role.OPERATOR, "admin": Membership.Role.ADMIN}
"""The least role a scope needs in the project it acts in (``admin``: members, tokens)."""
SESSION_SCOPES = frozenset({"read", "run"})
"""What a logged-in browser session may do (ingest takes a token)."""

Projects = frozenset[str] | None
"""Names of the projects a reader may see; None: all of them (a superuser)."""


@dataclass(frozen=True)
class Access:
    """What one request may do (see the module docstring)."""

    user: Any
    scopes: frozenset[str]
    roles: dict[str, str] = field(default_factory=dict)
    """Project name to the user's role there."""
    superuser: bool = False
    token_project: str | None = None
    """The project of the bearer token the request came with, if any."""

    def _role_rank(self, project: str) -> int:
        if self.token_project is not None and project != self.token_project:
            return 0
        if self.superuser:
            return ROLE_RANK[Membership.Role.ADMIN]
        role = self.roles.get(project)
        return ROLE_RANK.get(role, 0) if role else 0

    def allows(self, project: str, scope: str) -> bool:
        """Whether the request may act with ``scope`` in ``project``."""
        if scope != "admin" and scope not in self.scopes:
            return False
        return self._role_rank(project) >= ROLE_RANK[SCOPE_ROLE[scope]]

    def readable(self) -> Projects:
        """The projects whose runs, sessions and events exist for the request: those where
        the user has a role (a token: its own project, if so). What it may do with them
        is :meth:`allows`' (the API's reads need the ``read`` scope too)."""
        if self.token_project is not None:
            return frozenset({self.token_project}) if self._role_rank(self.token_project) \
                else frozenset()
        if self.superuser:
            return None
        return frozenset(p for p in self.roles if self._role_rank(p))

    def sees(self, project: str) -> bool:
        """Whether ``project``'s rows exist for this request."""
        readable = self.readable()
        return readable is None or project in readable

    def require(self, project: str, scope: str, what: str) -> None:
        """Refuse (404 when the project's rows are invisible to the request, else 403)
        unless the request may act with ``scope`` in ``project``."""
        if self.allows(project, scope):
            return
        if not self.sees(project):
            raise NotFound(f"No {what}.")
        role = self.roles.get(project, "none")
        raise Forbidden(f"Your role in project {project!r} ({role}) does not allow this "
                        f"(it needs {SCOPE_ROLE[scope]}).", code="role")

    def project_for_start(self, requested: str | None) -> str:
        """The project a new run (or a new session) goes to: the one asked for, else the
        token's, else the ``default`` project when the user may run there, else the first
        (by name) where they may."""
        if requested:
            self.require(requested, "run", f"project {requested!r}")
            return requested
        if self.token_project is not None:
            self.require(self.token_project, "run", f"project {self.token_project!r}")
            return self.token_project
        if self.superuser and not self.roles:
            return DEFAULT_PROJECT
        runnable = sorted(p for p in self.roles if self.allows(p, "run"))
        if DEFAULT_PROJECT in runnable:
            return DEFAULT_PROJECT
        if runnable:
            return runnable[0]
        if self.superuser:
            return DEFAULT_PROJECT
        raise Forbidden("You may not start runs in any project (your roles: "
                        f"{self._roles_text()}); ask a project admin for the operator role.",
                        code="role")

    def _roles_text(self) -> str:
        return ", ".join(f"{p}: {r}" for p, r in sorted(self.roles.items())) or "none"


async def user_roles(user: Any) -> dict[str, str]:
    """Project name to ``user``'s role there."""
    rows = Membership.objects.filter(user_id=user.pk).values_list("project_id", "role")
    return {project: role async for project, role in rows}


async def for_user(user: Any, scopes: frozenset[str] = SESSION_SCOPES,
                   token_project: str | None = None) -> Access:
    """The access of an authenticated ``user`` (optionally through a token)."""
    return Access(user=user, scopes=scopes, roles=await user_roles(user),
                  superuser=bool(getattr(user, "is_superuser", False)),
                  token_project=token_project)


def roles_sync(user: Any) -> dict[str, str]:
    """:func:`user_roles`, for synchronous code (the admin, commands)."""
    return dict(Membership.objects.filter(user_id=user.pk).values_list("project_id", "role"))


def administers(user: Any, project: Project | str) -> bool:
    """Whether ``user`` manages ``project``'s members and tokens (synchronous)."""
    name = project if isinstance(project, str) else project.pk
    if getattr(user, "is_superuser", False):
        return True
    return Membership.objects.filter(user_id=user.pk, project_id=name,
                                     role=Membership.Role.ADMIN).exists()


__all__ = ["DEFAULT_PROJECT", "SESSION_SCOPES", "Access", "Forbidden", "NotFound", "Projects",
           "administers", "for_user", "roles_sync", "user_roles"]
