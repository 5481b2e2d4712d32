"""Login throttling per address as well as per user name and address (django-axes with
:class:`picoflow_web.http.login_throttle.LoginThrottleHandler`): password spraying, a few
guesses at each of many names from one address, is locked out too."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.webhelpers import PASSWORD

pytestmark = pytest.mark.django_db

SPRAYER = "10.0.0.9"
ELSEWHERE = "10.0.0.10"
ACCOUNTS = [f"user{n}" for n in range(7)]


def login(username: str, password: str, address: str) -> Any:
    client = Client()
    client.get("/login/")
    return client.post("/login/", {"username": username, "password": password},
                       REMOTE_ADDR=address)


@pytest.fixture
def accounts(django_user_model: Any) -> list[str]:
    for name in ACCOUNTS:
        django_user_model.objects.create_user(name, password=PASSWORD)
    return ACCOUNTS


def test_spraying_wrong_passwords_across_names_locks_the_address_out(
        accounts: list[str], settings: Any) -> None:
    # 28 wrong passwords, 4 per name: under the limit of each name and address pair.
    assert settings.AXES_FAILURE_LIMIT > 4
    assert settings.PICOFLOW_LOGIN_IP_FAILURE_LIMIT <= 28
    answers = [login(name, f"guess-{guess}", SPRAYER).status_code
               for guess in range(4) for name in accounts]
    limit = settings.PICOFLOW_LOGIN_IP_FAILURE_LIMIT
    assert answers[:limit - 1] == [200] * (limit - 1)  # the form again
    assert answers[limit - 1:] == [429] * (28 - limit + 1)
    # Locked: even the right password of a name does not log in from there...
    right = login(accounts[0], PASSWORD, SPRAYER)
    assert right.status_code == 429 and "_auth_user_id" not in right.client.session
    # ...nor a name never tried.
    assert login("user-new", "x", SPRAYER).status_code == 429
    # Another address logs in.
    assert login(accounts[0], PASSWORD, ELSEWHERE).status_code == 302


def test_a_good_login_does_not_clear_the_failures_of_other_names(
        accounts: list[str], settings: Any) -> None:
    # One's own account (the one name the sprayer knows the password of) logs in between
    # guesses at the others: the address's count goes on.
    limit = settings.PICOFLOW_LOGIN_IP_FAILURE_LIMIT
    guesses = 0
    while guesses < limit - 1:
        for name in accounts[1:]:
            if guesses < limit - 1:
                assert login(name, "guess", SPRAYER).status_code == 200
                guesses += 1
        assert login(accounts[0], PASSWORD, SPRAYER).status_code == 302
    assert login("user-new", "guess", SPRAYER).status_code == 429


def test_the_limit_per_address_is_set_by_its_variable(
        accounts: list[str], settings: Any) -> None:
    settings.PICOFLOW_LOGIN_IP_FAILURE_LIMIT = 3
    assert [login(name, "guess", SPRAYER).status_code for name in accounts[:4]] == [
        200, 200, 429, 429]
