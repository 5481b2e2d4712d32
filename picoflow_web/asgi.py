"""ASGI entry point of the standalone site: ``daphne picoflow_web.asgi:application``.

The flow engine is built here, so Daphne refuses to start on a bad ``PICOFLOW_FLOWS``.
HTTP goes to Django; WebSocket connections go through the channels router in
``picoflow_web.live.routing``, behind the session/auth middleware and an Origin check
against ``ALLOWED_HOSTS`` (:func:`picoflow_web.asgi_stack.with_picoflow`, which a project
of your own uses in its ``asgi.py``).
"""

import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "picoflow_web.config.settings")

# Set up Django (apps, settings) before anything that imports models.
django_asgi_app = get_asgi_application()

from picoflow_web.asgi_stack import with_picoflow

application = with_picoflow(django_asgi_app)

# Everything loaded so far lives as long as the process: leave it out of the collector's
# full passes, which otherwise walk all of it while a worker's relayed batches churn
# through the heap (pauses of 100+ ms for every page and API call being served).
gc.freeze()
