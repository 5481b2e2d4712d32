#!/usr/bin/env bash
# Make sure the services and packages the test suite needs are installed:
#   Debian: redis-server, postgresql (initdb/pg_ctl/postgres), chromium
#   pip:    the "test-services" extra (psycopg, channels-redis, websockets, playwright;
#           the Python package only: a browser build is never downloaded)
#
#   scripts/ensure_services.sh [PYTHON]     (PYTHON defaults to .venv/bin/python)
#
# Idempotent and quiet: when everything is there it only checks (well under a second)
# and prints nothing. Debian packages are installed only when running as root with
# apt-get available; otherwise what is missing is named and the tests that need it skip.
# Nothing is started here: the tests start private redis-server and PostgreSQL
# instances of their own.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${1:-.venv/bin/python}"
LOG_DIR="${ENSURE_SERVICES_LOG_DIR:-test-artifacts}"
mkdir -p "$LOG_DIR"
LOG="$LOG_DIR/ensure-services.log"

have_postgres() {
    command -v initdb >/dev/null 2>&1 && return 0
    compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null
}

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
have_postgres || missing+=(postgresql)
[ -x /usr/bin/chromium ] || missing+=(chromium)

if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "ensure_services: apt-get install ${missing[*]}  (log: $LOG)"
        export DEBIAN_FRONTEND=noninteractive
        # policy-rc.d may refuse to start daemons in a container; the tests start their own.
        # Wait for another apt/dpkg run (a parallel job) instead of failing at once.
        apt=(apt-get -q -o DPkg::Lock::Timeout=300)
        if ! { "${apt[@]}" update &&
               "${apt[@]}" install -y --no-install-recommends "${missing[@]}"; } \
                >>"$LOG" 2>&1; then
            echo "ensure_services: apt-get install failed; last lines of $LOG:" >&2
            tail -n 30 "$LOG" >&2
            exit 1
        fi
    else
        echo "ensure_services: missing ${missing[*]} (not root or no apt-get: not installing;" \
             "the tests that need them will skip)" >&2
    fi
fi

if [ ! -x "$PY" ]; then
    echo "ensure_services: $PY not found; create the virtualenv first (make venv)" >&2
    exit 1
fi
# The packaging tests (tests/packaging/) build the wheel with "build" (dev extra) and
# install it into fresh virtualenvs (venv with ensurepip: Debian's python3-venv).
if ! "$PY" -c 'import build, ensurepip, venv' >/dev/null 2>&1; then
    echo "ensure_services: pip install -e '.[dev]'  (log: $LOG)"
    "$PY" -m pip install --disable-pip-version-check -q -e '.[dev]' >>"$LOG" 2>&1 || {
        echo "ensure_services: pip install failed; last lines of $LOG:" >&2
        tail -n 30 "$LOG" >&2; exit 1; }
    "$PY" -c 'import ensurepip' >/dev/null 2>&1 || \
        echo "ensure_services: ensurepip missing: apt-get install python3-venv" >&2
fi
MODULES='psycopg channels_redis websockets playwright'
if ! "$PY" -c 'import importlib.util as u, sys
sys.exit(any(u.find_spec(m) is None for m in sys.argv[1:]))' $MODULES >/dev/null 2>&1; then
    echo "ensure_services: pip install -e '.[test-services]'  (log: $LOG)"
    if ! "$PY" -m pip install --disable-pip-version-check -q -e '.[test-services]' \
            >>"$LOG" 2>&1; then
        echo "ensure_services: pip install failed; last lines of $LOG:" >&2
        tail -n 30 "$LOG" >&2
        exit 1
    fi
fi
