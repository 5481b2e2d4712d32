"""django-axes with two limits: failed logins of one user name from one address
(``AXES_FAILURE_LIMIT``, ``PICOFLOW_LOGIN_FAILURE_LIMIT``) and failed logins from one
address whatever the names (``PICOFLOW_LOGIN_IP_FAILURE_LIMIT``).

Axes compares one limit with the largest count of its lockout parameters, and the count
of an address is never below that of a name at that address: listing ``ip_address`` there
would lock an address out after as few failures as one name, and a good login (which
resets what the parameters match) would clear the address's failures at every other name.
So the pair stays axes' lockout parameter, and this handler adds the address's own count
and limit: password spraying (a few guesses at each of many names) is locked out too,
while a user who mistypes is locked out alone, and a good login clears only its own name's
failures.
"""

from __future__ import annotations

from typing import Any

from axes.attempts import get_cool_off_threshold
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_failure_limit
from axes.models import AccessAttempt
from django.conf import settings
from django.db.models import Sum
from django.http import HttpRequest


class LoginThrottleHandler(AxesDatabaseHandler):  # type: ignore[misc]
    """Axes' database handler, counting an address's failures against their own limit."""

    def get_failures(self, request: HttpRequest, credentials: dict[str, Any] | None = None
                     ) -> int:
        failures: int = super().get_failures(request, credentials)
        limit = getattr(settings, "PICOFLOW_LOGIN_IP_FAILURE_LIMIT", None)
        address = getattr(request, "axes_ip_address", None)
        if not limit or not address:
            return failures
        if self._address_failures(request, address) < limit:
            return failures
        # As many as locks out: axes holds one limit, the name and address pair's.
        return max(failures, int(get_failure_limit(request, credentials)))

    @staticmethod
    def _address_failures(request: HttpRequest, address: str) -> int:
        attempts = AccessAttempt.objects.filter(ip_address=address)
        if settings.AXES_COOLOFF_TIME is not None:
            attempts = attempts.filter(attempt_time__gte=get_cool_off_threshold(request))
        total = attempts.aggregate(total=Sum("failures_since_start"))["total"]
        return int(total or 0)
