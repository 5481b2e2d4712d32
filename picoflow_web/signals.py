"""Tokens stop working when their user is deactivated or changes password.

The token check itself refuses such tokens too (:meth:`ApiToken.refusal` compares the
user's password stamp and ``is_active``), which also covers writes that bypass signals
(``QuerySet.update``); this handler marks them revoked at once, so listings and the admin
say so, and a reactivated user does not get old tokens back.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models.signals import pre_save
from django.utils import timezone

from picoflow_web.models import ApiToken


def revoke_tokens_on_user_change(sender: Any, instance: Any, raw: bool = False,
                                 **kwargs: Any) -> None:
    """``pre_save`` of the user model: compare with the stored row."""
    if raw or instance.pk is None:
        return
    before = sender.objects.filter(pk=instance.pk).values("password", "is_active").first()
    if before is None:
        return
    reason = ("user_inactive" if before["is_active"] and not instance.is_active
              else "password_changed" if before["password"] != instance.password else None)
    if reason:
        ApiToken.objects.filter(user_id=instance.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now(), revoked_reason=reason)


def connect() -> None:
    pre_save.connect(revoke_tokens_on_user_change, sender=get_user_model(),
                     dispatch_uid="picoflow_revoke_tokens")


__all__ = ["connect", "revoke_tokens_on_user_change"]
