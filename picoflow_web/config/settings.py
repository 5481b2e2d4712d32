"""Django settings for PicoFlow Web.

Every value comes from an environment variable with an embedded default, so
``make run`` works with nothing set (SQLite, in-memory channel layer). The defaults are
production-safe: ``DEBUG`` is off unless asked for.

Plain HTTP and HTTPS: with ``DEBUG`` off the HTTPS hardening is on (``PICOFLOW_HTTPS``:
plain HTTP redirected, ``Secure`` cookies, HSTS; ``manage.py check --deploy`` is clean) as
soon as anything but this machine can reach the site: when
``PICOFLOW_ALLOWED_HOSTS`` names a host that is not a loopback name, or
``PICOFLOW_CSRF_TRUSTED_ORIGINS`` or ``PICOFLOW_SECURE_PROXY_SSL_HEADER`` is set (a site
behind a proxy needs one of them for its login to work). With the defaults it answers only
``127.0.0.1``, ``localhost`` and ``[::1]``: plain HTTP, so ``picoflow-web serve``, ``daphne
picoflow_web.asgi:application`` and the tests' client work over ``http://127.0.0.1:8000``
with nothing set (and ``check --deploy`` says it is no deployment).

Error reports and logs show no credentials (:mod:`picoflow_web.config.masking`): settings named
like secrets are hidden, and URL passwords and bearer tokens are masked in settings,
request headers, a failing frame's locals, exception messages and every console log line.
Every error under ``/api/``, ``/ai/`` and ``/v1/`` is JSON, ``DEBUG`` on or off
(:class:`picoflow_web.http.error_answers.JsonErrorsMiddleware`).

Data files are private: the data folder is created 0700, the SQLite database (so its WAL
and shared-memory files), the secret key and the first user's password 0600.

Environment variables
---------------------
PICOFLOW_DEBUG
    ``1``/``0`` (also true/false, yes/no, on/off). Default ``0``. ``1`` turns Django's
    debug mode on (its debug page for errors outside the API's paths, static files read
    from their source folders): for development only (``make run`` sets it). Off, the
    static files are served hashed and compressed once ``collectstatic`` has written them to
    ``$PICOFLOW_DATA_DIR/staticfiles`` (``serve`` does), else from their source folders.
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
    and the collected static files (``staticfiles/``), created 0700. Relative paths are
    taken from the checkout (installed: the current folder). Default ``var/`` in a
    checkout, else the per-user data folder (``~/.local/share/picoflow-web`` on Linux;
    see :mod:`picoflow_web.config.locations`).
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
PICOFLOW_HTTPS
    ``1``: the site is reached over HTTPS (directly or through a TLS-terminating proxy):
    plain HTTP is redirected, session and CSRF cookies are ``Secure``, HSTS is sent (a
    year, subdomains, preload). ``0``: plain HTTP (a trusted network only). Default: on
    when DEBUG is off and the site is not loopback-only (above).
PICOFLOW_SECURE_SSL_REDIRECT
    Redirect plain HTTP to HTTPS. Default: ``PICOFLOW_HTTPS``.
PICOFLOW_SECURE_PROXY_SSL_HEADER
    ``1`` to trust ``X-Forwarded-Proto: https`` from a TLS-terminating reverse
    proxy. Default ``0``.
PICOFLOW_REMOTE_TIMEOUT
    Seconds a remote run (one shipped to ``/api/ingest``) may stay silent — no events, no
    heartbeats — before it is declared ``interrupted``. Default 30.
PICOFLOW_WORKER_LEASE
    Seconds a worker's lease on a run lasts; the worker renews it while the turn runs
    (every quarter of it). A run whose lease expired (worker killed, machine gone) becomes
    ``interrupted``; time the database took no writes (a lock held elsewhere) counts only
    once it ended. Default 10.
PICOFLOW_RUN_WAIT
    Seconds ``POST /ai/run`` waits for its turn's end before it answers 202 with the run's
    id and where to follow it (``/api/runs/<id>``); the run goes on. Default 300.
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
PICOFLOW_LOGIN_IP_FAILURE_LIMIT
    Failed logins from one address, whatever the user names, before that address is
    locked out (for PICOFLOW_LOGIN_COOLOFF seconds too). Default 20.
PICOFLOW_REDACT_KEYS
    Comma-separated names whose values are secrets, added to the built-in ones
    (:data:`picoflow_web.data.redact.BUILTIN_KEYS`: ``secret``, ``passw*``, ``private_key``,
    ``token``, ``credential``, ``cookie``, ``api_key``, ``bearer``, ``authorization``;
    ``manage.py redact_keys`` lists them all). In a client's config and message, a
    session's context, state and messages and every event, what is under a name holding
    one of them — matched on its words, case, ``_``, ``-``, ``.`` and camelCase ignored,
    plurals too; ``*`` ends a prefix — is stored and shown as ``[redacted]`` (a number under
    a name that measures, such as ``max_tokens``, stays), and so is the password of a URL
    in any text. Default: none added.
PICOFLOW_LOG_LEVEL
    Log level for the console logger. Default ``INFO``.
PICOFLOW_FLOWS, PICOFLOW_DEMOS
    The flows served (your own, and whether the demos are too); read when the app is
    ready, see :mod:`picoflow_web.execute.flows`.

The app reads its own settings through :func:`picoflow_web.config.app_settings.get`, which a
project embedding the app feeds from one ``PICOFLOW = {...}`` dict instead (README).
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from picoflow_web.config import locations
from picoflow_web.config.env import (
    create_private_file,
    env_bool,
    env_int,
    env_list,
    env_seconds,
    load_or_create_secret_key,
    loopback_only,
    make_private_dir,
    parse_database_url,
    resolve_path,
    sqlite_database,
)

# The checkout's root, or (installed from a wheel) the folder relative paths are taken from.
BASE_DIR = locations.relative_base()

DEBUG = env_bool("PICOFLOW_DEBUG", False)


# Module-level names an error report lists are settings: what is only read from the
# environment to build them stays inside functions (a DATABASE_URL carries a password).
def _data_dir() -> Path:
    raw = os.environ.get("PICOFLOW_DATA_DIR", "").strip()
    return resolve_path(raw, BASE_DIR) if raw else locations.default_data_dir()


DATA_DIR = _data_dir()
make_private_dir(DATA_DIR)
PICOFLOW_DATA_DIR = DATA_DIR

SECRET_KEY = os.environ.get("PICOFLOW_SECRET_KEY") or load_or_create_secret_key(
    DATA_DIR / "secret_key"
)

ALLOWED_HOSTS = env_list("PICOFLOW_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]")
CSRF_TRUSTED_ORIGINS = env_list("PICOFLOW_CSRF_TRUSTED_ORIGINS", "")
PICOFLOW_REMOTE_TIMEOUT = env_seconds("PICOFLOW_REMOTE_TIMEOUT", 30.0)
PICOFLOW_WORKER_LEASE = env_seconds("PICOFLOW_WORKER_LEASE", 10.0)
PICOFLOW_WORKER_POLL = env_seconds("PICOFLOW_WORKER_POLL", 0.1)
PICOFLOW_RUN_WAIT = env_seconds("PICOFLOW_RUN_WAIT", 300.0)
PICOFLOW_WORKER_CONCURRENCY = env_int("PICOFLOW_WORKER_CONCURRENCY", 1)
PICOFLOW_WORKERS = env_int("PICOFLOW_WORKERS", 4, minimum=0)
PICOFLOW_MAX_BRANCHES = env_int("PICOFLOW_MAX_BRANCHES", 100_000)
PICOFLOW_RELAY_URL = os.environ.get("PICOFLOW_RELAY_URL", "").strip().rstrip("/")
PICOFLOW_REDACT_KEYS = tuple(env_list("PICOFLOW_REDACT_KEYS", ""))

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
    # First: it turns any error under the API's paths into JSON, whoever answered it.
    "picoflow_web.http.error_answers.JsonErrorsMiddleware",
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
# (per pair, so one attacker cannot lock everyone out); after
# PICOFLOW_LOGIN_IP_FAILURE_LIMIT from one address, whatever the names, that address is
# (so it cannot try a few passwords at every name). See picoflow_web.http.login_throttle.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("PICOFLOW_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(seconds=env_seconds("PICOFLOW_LOGIN_COOLOFF", 900.0))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_HANDLER = "picoflow_web.http.login_throttle.LoginThrottleHandler"
PICOFLOW_LOGIN_IP_FAILURE_LIMIT = env_int("PICOFLOW_LOGIN_IP_FAILURE_LIMIT", 20)

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

ROOT_URLCONF = "picoflow_web.config.site_urls"

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


def _database() -> dict[str, Any]:
    url = os.environ.get("DATABASE_URL", "").strip()
    config = (parse_database_url(url, BASE_DIR) if url
              else sqlite_database(DATA_DIR / "picoflow.sqlite3"))
    if config["ENGINE"] == "django.db.backends.sqlite3":
        # Created private before SQLite first opens it: its WAL and shared-memory files
        # take its mode.
        create_private_file(Path(config["NAME"]))
    return config


def _channel_layers() -> dict[str, dict[str, Any]]:
    url = os.environ.get("REDIS_URL", "").strip()
    if url:
        return {"default": {"BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
                            "CONFIG": {"hosts": [url]}}}
    return {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer",
                        "CONFIG": {"capacity": 100_000}}}


DATABASES: dict[str, dict[str, Any]] = {"default": _database()}
CHANNEL_LAYERS = _channel_layers()

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

# Static files: WhiteNoise serves them from Daphne. With DEBUG on it reads the source
# folders (finders). With DEBUG off it serves the hashed, compressed copies
# ``collectstatic`` writes to STATIC_ROOT once they exist (``serve`` collects first), and
# the source folders until then: a checkout's tests and live servers need no collecting.
STATIC_URL = "/static/"
# Installed, the static files are in the package (the app-directories finder); in a
# checkout, at the top. Collected copies go into the data folder (site-packages is no place
# to write to; one data folder's copies never serve another's server or tests).
STATICFILES_DIRS = [d for d in [locations.extra_static_dir()] if d is not None]
STATIC_ROOT = DATA_DIR / "staticfiles"
WHITENOISE_USE_FINDERS = DEBUG or not (STATIC_ROOT / "staticfiles.json").is_file()
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "picoflow_web.config.staticstorage.CollectedStaticFilesStorage"
        ),
    },
}

SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
_behind_tls_proxy = env_bool("PICOFLOW_SECURE_PROXY_SSL_HEADER", False)
if _behind_tls_proxy:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# HTTPS hardening (``manage.py check --deploy`` is clean with it), unless only this machine
# can reach the site (see the docstring).
_loopback_only = (loopback_only(ALLOWED_HOSTS) and not CSRF_TRUSTED_ORIGINS
                  and not _behind_tls_proxy)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("PICOFLOW_HTTPS",
                                                      not DEBUG and not _loopback_only)
SECURE_SSL_REDIRECT = env_bool("PICOFLOW_SECURE_SSL_REDIRECT", SESSION_COOKIE_SECURE)
if SESSION_COOKIE_SECURE:
    SECURE_HSTS_SECONDS = 31_536_000
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True

# Error reports (the debug page, an AdminEmailHandler's mail) and log lines show no
# credentials.
DEFAULT_EXCEPTION_REPORTER_FILTER = "picoflow_web.config.masking.SafeExceptionReporterFilter"
DEFAULT_EXCEPTION_REPORTER = "picoflow_web.config.masking.ExceptionReporter"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "mask_credentials": {"()": "picoflow_web.config.masking.MaskCredentials"},
    },
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain",
                    "filters": ["mask_credentials"]},
    },
    # Django's own handlers for its loggers (a console copy with DEBUG on, unmasked) are
    # replaced: its records reach the root's console, masked, once.
    "loggers": {
        "django": {"handlers": [], "propagate": True},
    },
    "root": {
        "handlers": ["console"],
        "level": os.environ.get("PICOFLOW_LOG_LEVEL", "INFO").upper(),
    },
}

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "index"
LOGOUT_REDIRECT_URL = "login"
