"""The ``picoflow-web`` command: the dashboard anywhere it is installed, in one command.

    picoflow-web serve [--host H] [--port P] [--data-dir DIR] [--workers N]
    picoflow-web manage [--data-dir DIR] <management command> [args...]

``serve`` applies the migrations, collects the static files (only what changed), creates
the first user once (printing how to log in) and runs ``manage.py serve``: Daphne and the
run workers. It is what ``make run`` runs, so the checkout and an installed wheel start the
same way. The data (SQLite database, secret key, first user's password, collected static
files) goes to ``--data-dir``, else ``PICOFLOW_DATA_DIR``, else the checkout's ``var/`` or,
installed, the per-user data folder (``~/.local/share/picoflow-web`` on Linux), created
readable by its owner only. It runs as in production: Django's debug page is off unless
``PICOFLOW_DEBUG=1`` is set (``make run`` sets it); with the default hosts (loopback only)
it serves plain HTTP on ``http://127.0.0.1:8000`` (see :mod:`picoflow_web.config.settings`).

``manage`` is ``manage.py`` for an installed wheel, on the same settings and the same data
folder rule: ``--data-dir``, else ``PICOFLOW_DATA_DIR``, else the default above.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from picoflow_web import __version__

SETTINGS = "picoflow_web.config.settings"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="picoflow-web", description="PicoFlow Web: the dashboard and its run workers.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     help="serve or manage")
    serve = commands.add_parser(
        "serve", help="migrate, collect static files, create the first user, start Daphne "
                      "and the workers")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default: 127.0.0.1, this machine only; "
                            "another address also needs PICOFLOW_ALLOWED_HOSTS)")
    serve.add_argument("--port", type=int, default=8000,
                       help="port to listen on (default: 8000)")
    serve.add_argument("--data-dir", help="data folder (default: PICOFLOW_DATA_DIR, else "
                                           "the per-user data folder)")
    serve.add_argument("--workers", type=int, default=None,
                       help="worker processes (default: PICOFLOW_WORKERS, 4)")
    commands.add_parser("manage", help="a Django management command, as manage.py runs it "
                                        "([--data-dir DIR] COMMAND [ARGS...])",
                        add_help=False)
    return parser


def _use_data_dir(path: str) -> None:
    # Before Django reads its settings: the database and secret key live there.
    os.environ["PICOFLOW_DATA_DIR"] = os.path.abspath(os.path.expanduser(path))


def _take_data_dir(args: list[str]) -> list[str]:
    """``args`` without ``--data-dir DIR`` (or ``--data-dir=DIR``), which it applies: a
    management command then reads the database ``serve --data-dir DIR`` made."""
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg.startswith("--data-dir="):
            _use_data_dir(arg.split("=", 1)[1])
            return args[:i] + args[i + 1:]
        if arg == "--data-dir":
            if i + 1 >= len(args):
                raise SystemExit("picoflow-web manage: --data-dir needs a folder")
            _use_data_dir(args[i + 1])
            return args[:i] + args[i + 2:]
    return args


def _web_missing() -> bool:
    """True when only the runtime is installed (``pip install picoflow-web`` without the
    ``web`` extra): say how to get the dashboard instead of a traceback."""
    try:
        import channels  # noqa: F401
        import daphne  # noqa: F401
        import django  # noqa: F401
    except ImportError as exc:
        print(f"picoflow-web: the dashboard is not installed ({exc.name} is missing); "
              "install it with: pip install 'picoflow-web[web]'", file=sys.stderr)
        return True
    return False


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["manage"]:
        if _web_missing():
            return 2
        rest = _take_data_dir(args_in[1:])
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", SETTINGS)
        from django.core.management import execute_from_command_line

        execute_from_command_line(["picoflow-web manage", *rest])
        return 0
    args = _parser().parse_args(args_in)
    if _web_missing():
        return 2
    if args.data_dir:
        _use_data_dir(args.data_dir)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", SETTINGS)
    serve(args.host, args.port, args.workers)
    return 0


def serve(host: str, port: int, workers: int | None) -> None:
    """Prepare the data folder and database, then run Daphne and the workers."""
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", "--noinput", verbosity=0)
    # Copies only files that changed since the last start: cheap when nothing did.
    call_command("collectstatic", "--noinput", verbosity=0)
    call_command("ensure_admin")
    options = {} if workers is None else {"workers": workers}
    call_command("serve", host=host, port=port, **options)


if __name__ == "__main__":
    raise SystemExit(main())
