"""``{% administers_any as flag %}``: whether the signed-in user administers a project, so
the navigation offers the API tokens page only to those who may use it."""

from __future__ import annotations

from typing import Any

from django import template

from picoflow_web.models import Membership

register = template.Library()


@register.simple_tag(takes_context=True)
def administers_any(context: dict[str, Any]) -> bool:
    """True for superusers and for admins of any project; False for anyone else."""
    user = context.get("user")  # the auth context processor's, as the header's
    if user is None or not user.is_authenticated:
        return False
    if user.is_superuser:
        return True
    return Membership.objects.filter(user_id=user.pk, role=Membership.Role.ADMIN).exists()
