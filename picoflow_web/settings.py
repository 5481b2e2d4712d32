"""Django settings for PicoFlow Web.

Every value comes from an environment variable with an embedded default, so
``make run`` works with nothing set (SQLite, in-memory channel layer, DEBUG on).

Environment variables
---------------------
PICOFLOW_DEBUG
    ``1``/``0`` (also true/false, yes/no, on/off). Default ``1``. Turn it off in
    production; that also switches on the HTTPS hardening below and the hashed,
    compressed static files storage (run ``collectstatic`` first).
PICOFLOW_SECRET_KEY
    Django's secret key. Default: a random key generated on first start and kept
    in ``$PICOFLOW_DATA_DIR/secret_key`` so it is stable across restarts.
PICOFLOW_ALLOWED_HOSTS
    Comma-separated host names. Default ``127.0.0.1,localhost,[::1]``.
PICOFLOW_CSRF_TRUSTED_ORIGINS
    Comma-separated origins (``https://flows.example.com``) trusted for unsafe
    requests. Default: none.
PICOFLOW_DATA_DIR
    Folder for the SQLite database, the generated secret key, the first user's password
    and (installed, not in a checkout) the collected static files. Relative paths are
    taken from the checkout (installed: the current folder). Default ``var/`` in a
    checkout, else the per-user data folder (``~/.local/share/picoflow-web`` on Linux;
    see :mod:`picoflow_web.locations`).
DATABASE_URL
    ``sqlite:///relative.sqlite3``, ``sqlite:////absolute.sqlite3``,
    ``postgres://user:pass@host:5432/dbname`` or ``postgresql://...`` (query
    parameters such as ``?sslmode=require`` become connection options; needs the
    ``postgres`` extra). Default: SQLite at ``$PICOFLOW_DATA_DIR/picoflow.sqlite3``.
REDIS_URL
    ``redis://host:6379/0``. When set, channels uses
    ``channels_redis.pubsub.RedisPubSubChannelLayer`` (needs the ``redis`` extra),
    which lets several Daphne processes share events. Default: unset, and the
    per-process ``InMemoryChannelLayer`` is used.
PICOFLOW_SECURE_SSL_REDIRECT
    Redirect plain HTTP to HTTPS. Default: on when DEBUG is off.
PICOFLOW_SECURE_PROXY_SSL_HEADER
    ``1`` to trust ``X-Forwarded-Proto: https`` from a TLS-terminating reverse
    proxy. Default ``0``.
PICOFLOW_REMOTE_TIMEOUT
    Seconds a remote run (one shipped to ``/api/ingest``) may stay silent — no events, no
    heartbeats — before it is declared ``interrupted``. Default 30.
PICOFLOW_WORKER_LEASE
    Seconds a worker's lease on a run lasts; the worker renews it while the turn runs
    (every quarter of it). A run whose lease expired (worker killed, machine gone) becomes
    ``interrupted``. Default 10.
PICOFLOW_WORKER_POLL
    Seconds an idle worker waits before looking for a queued run again. Default 0.1.
PICOFLOW_WORKER_CONCURRENCY
    Runs one worker process executes at once (threads, each taking one run at a time).
    Default 1: on CPython, processes (``PICOFLOW_WORKERS``) use more cores than threads.
PICOFLOW_WORKERS
    Worker processes ``manage.py serve`` (``make run``) starts beside Daphne. Default 4.
PICOFLOW_MAX_BRANCHES
    Most branches one run may fork in all (every barrier of the turn together), whatever
    the flow allows; a run that asks for more fails at the fork. Default 100000.
PICOFLOW_RELAY_URL
    Where a worker sends live events and run summaries for browsers when the channel layer
    is the in-memory one (each process has its own): the web server's base URL, e.g.
    ``http://127.0.0.1:8000``. ``manage.py serve`` sets it for its workers. Unused with
    ``REDIS_URL`` (workers then publish to Redis themselves). Default: unset.
PICOFLOW_LOGIN_FAILURE_LIMIT, PICOFLOW_LOGIN_COOLOFF
    Failed logins of one user name from one address before that pair is locked out
    (django-axes), default 5; and for how many seconds, default 900.
PICOFLOW_REDACT_KEYS
    Comma-separated key names whose values are secrets: in a client's config, a session's
    context and state and every event, values under a key that is (or ends with) one of
    them — case, ``-`` and ``_`` ignored — are stored and shown as ``[redacted]``. Default
    ``api_key,apikey,token,secret,password,authorization``.
PICOFLOW_LOG_LEVEL
    Log level for the console logger. Default ``INFO``.
PICOFLOW_FLOWS, PICOFLOW_DEMOS
    The flows served (your own, and whether the demos are too); read when the app is
    ready, see :mod:`picoflow_web.flows`.

The app reads its own settings through :func:`picoflow_web.app_settings.get`, which a
project embedding the app feeds from one ``PICOFLOW = {...}`` dict instead (README).
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from picoflow_web import locations
from picoflow_web.conf import (
    env_bool,
    env_int,
    env_list,
    env_seconds,
    load_or_create_secret_key,
    parse_database_url,
    resolve_path,
    sqlite_database,
)

# The checkout's root, or (installed from a wheel) the folder relative paths are taken from.
BASE_DIR = locations.relative_base()
CHECKOUT = locations.checkout_dir()

DEBUG = env_bool("PICOFLOW_DEBUG", True)

_DATA_DIR = os.environ.get("PICOFLOW_DATA_DIR", "").strip()
DATA_DIR = resolve_path(_DATA_DIR, BASE_DIR) if _DATA_DIR else locations.default_data_dir()
DATA_DIR.mkdir(parents=True, exist_ok=True)
PICOFLOW_DATA_DIR = DATA_DIR

SECRET_KEY = os.environ.get("PICOFLOW_SECRET_KEY") or load_or_create_secret_key(
    DATA_DIR / "secret_key"
)

ALLOWED_HOSTS = env_list("PICOFLOW_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("PICOFLOW_CSRF_TRUSTED_ORIGINS", "")
PICOFLOW_REMOTE_TIMEOUT = env_seconds("PICOFLOW_REMOTE_TIMEOUT", 30.0)
PICOFLOW_WORKER_LEASE = env_seconds("PICOFLOW_WORKER_LEASE", 10.0)
PICOFLOW_WORKER_POLL = env_seconds("PICOFLOW_WORKER_POLL", 0.1)
PICOFLOW_WORKER_CONCURRENCY = env_int("PICOFLOW_WORKER_CONCURRENCY", 1)
PICOFLOW_WORKERS = env_int("PICOFLOW_WORKERS", 4, minimum=0)
PICOFLOW_MAX_BRANCHES = env_int("PICOFLOW_MAX_BRANCHES", 100_000)
PICOFLOW_RELAY_URL = os.environ.get("PICOFLOW_RELAY_URL", "").strip().rstrip("/")
PICOFLOW_REDACT_KEYS = tuple(env_list(
    "PICOFLOW_REDACT_KEYS", "api_key,apikey,token,secret,password,authorization"))

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "axes",  # login throttling
    "csp",  # Content-Security-Policy
    # Before django_tasks_db: its db_worker command is extended by picoflow_web's.
    "picoflow_web",
    "django_tasks",
    "django_tasks_db",
]

# Runs execute in worker processes (manage.py db_worker), queued in the database.
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into its lockout response.
    "axes.middleware.AxesMiddleware",
]

# Login throttling (django-axes): after PICOFLOW_LOGIN_FAILURE_LIMIT failed logins of one
# user name from one address, that pair is locked out for PICOFLOW_LOGIN_COOLOFF seconds
# (per pair, so one attacker cannot lock everyone out, nor one address try every name).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("PICOFLOW_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(seconds=env_seconds("PICOFLOW_LOGIN_COOLOFF", 900.0))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True

# Content-Security-Policy (django-csp): the pages load only their own scripts, styles and
# images (no inline script anywhere; ``json_script`` data blocks are not executed) and
# talk only to their own origin (the websockets too: 'self' covers ws/wss of the host).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "font-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}

ROOT_URLCONF = "picoflow_web.site_urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # Installed, the templates are in the package (APP_DIRS); in a checkout, at the top.
        "DIRS": [d for d in [locations.extra_templates_dir()] if d is not None],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

ASGI_APPLICATION = "picoflow_web.asgi.application"

_DATABASE_URL = os.environ.get("DATABASE_URL", "").strip()
DATABASES: dict[str, dict[str, Any]] = {
    "default": (
        parse_database_url(_DATABASE_URL, BASE_DIR)
        if _DATABASE_URL
        else sqlite_database(DATA_DIR / "picoflow.sqlite3")
    )
}

_REDIS_URL = os.environ.get("REDIS_URL", "").strip()
if _REDIS_URL:
    CHANNEL_LAYERS: dict[str, dict[str, Any]] = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [_REDIS_URL]},
        }
    }
else:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels.layers.InMemoryChannelLayer",
            "CONFIG": {"capacity": 100_000},
        }
    }

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Static files: WhiteNoise serves them from Daphne. With DEBUG on it reads the
# source folders directly (finders); with DEBUG off it serves the hashed,
# compressed copies that ``collectstatic`` writes to STATIC_ROOT.
STATIC_URL = "/static/"
# Installed, the static files are in the package (the app-directories finder); in a
# checkout, at the top. Collected copies go next to the checkout, else into the data folder
# (site-packages is no place to write to).
STATICFILES_DIRS = [d for d in [locations.extra_static_dir()] if d is not None]
STATIC_ROOT = CHECKOUT / "staticfiles" if CHECKOUT is not None else DATA_DIR / "staticfiles"
WHITENOISE_USE_FINDERS = DEBUG
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "whitenoise.storage.CompressedManifestStaticFilesStorage"
        ),
    },
}

# HTTPS hardening, on whenever DEBUG is off (``manage.py check --deploy`` is clean).
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
if env_bool("PICOFLOW_SECURE_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
if not DEBUG:
    SECURE_SSL_REDIRECT = env_bool("PICOFLOW_SECURE_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = 31_536_000
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
else:
    SECURE_SSL_REDIRECT = env_bool("PICOFLOW_SECURE_SSL_REDIRECT", False)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
    },
    "root": {
        "handlers": ["console"],
        "level": os.environ.get("PICOFLOW_LOG_LEVEL", "INFO").upper(),
    },
}

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "index"
LOGOUT_REDIRECT_URL = "login"
