"""``python -m picoflow_web``: the ``picoflow-web`` command (:mod:`picoflow_web.cli`)."""

from picoflow_web.cli import main

raise SystemExit(main())
