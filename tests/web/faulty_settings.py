"""The standalone site's settings plus :mod:`tests.web.faulty_urls`: pages that fail, for
the tests of what a failure shows (``DJANGO_SETTINGS_MODULE=tests.web.faulty_settings``)."""

from picoflow_web.config.settings import *  # noqa: F403

ROOT_URLCONF = "tests.web.faulty_urls"
