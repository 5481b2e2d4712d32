"""Publishing to browsers from any process: a run's events and the runs list's summaries.

Browsers listen on channel-layer groups (:mod:`picoflow_web.live.groups`) through the web
server's websocket consumers. A message for them is published here, and how depends on the
process and the layer:

* with a shared layer (Redis, ``REDIS_URL``) every process sends to the group itself;
* in the web server, the in-memory layer is the one its consumers listen on;
* in a worker with the in-memory layer (the embedded default), the layer is the worker's
  own, which no browser hears: the messages go to the web server (``PICOFLOW_RELAY_URL``)
  over one websocket per worker, ``ws/relay/`` (:mod:`picoflow_web.live.relay_sender`), whose
  consumer sends them to its groups. The socket's handshake carries a key derived from
  ``SECRET_KEY``, which every process of one installation shares.

Messages are published only after what they describe is stored, so a lost one costs a
browser nothing it cannot read back: the run consumer fills any gap from the store.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import queue
import re
import threading

from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings

from picoflow_web.config import app_settings
from picoflow_web.live.relay_sender import Message, Sender, plain

logger = logging.getLogger("picoflow.web")

HEADER = "PicoFlow-Relay-Key"
MESSAGE_TYPES = frozenset({"run.events", "run.summary"})
"""What may be relayed: consumers' ``run_events`` and ``run_summary``."""
_GROUP = re.compile(r"runs|run[._][A-Za-z0-9._-]{1,64}")
"""The groups a relay frame may name (:mod:`picoflow_web.live.groups`): names Channels takes."""

SERVES_WEBSOCKETS = False
"""Set by :mod:`picoflow_web.asgi`: this process is a web server, its in-memory layer is
the one browsers listen on."""


def key() -> str:
    """The relay key of this installation (from ``SECRET_KEY``)."""
    return hmac.new(settings.SECRET_KEY.encode(), b"picoflow-relay-v1",
                    hashlib.sha256).hexdigest()


def key_matches(offered: str) -> bool:
    return hmac.compare_digest(offered.encode(), key().encode())


def _remote() -> bool:
    if SERVES_WEBSOCKETS or not app_settings.get("RELAY_URL"):
        return False
    return isinstance(get_channel_layer(), InMemoryChannelLayer)


_SENDER: Sender | None = None
_SENDER_LOCK = threading.Lock()


def _sender() -> Sender:
    global _SENDER
    with _SENDER_LOCK:
        if _SENDER is None:
            _SENDER = Sender(app_settings.get("RELAY_URL"), {HEADER: key()})
        return _SENDER


async def publish(messages: list[Message]) -> None:
    """Send ``messages`` to their groups, wherever the browsers listen (see above)."""
    if not messages:
        return
    if _remote():
        sender = _sender()
        try:
            sender.put(messages, block=False)
        except queue.Full:  # the web server lags: the run waits here, nothing is dropped
            await sync_to_async(sender.put, thread_sensitive=False)(messages)
        return
    layer = get_channel_layer()
    if layer is not None:
        for group, message in messages:
            await layer.group_send(group, plain(message))


def publish_sync(messages: list[Message]) -> None:
    """:func:`publish` from a thread with no event loop (a worker's lease keeper)."""
    if not messages:
        return
    if _remote():
        _sender().put(messages)
    else:
        async_to_sync(publish)(messages)


def drain(timeout: float = 5.0) -> bool:
    """Wait until what this process published has left for the web server (a worker, at
    the end of a run, so the run's last events are not left in its queue)."""
    return _SENDER.drain(timeout) if _SENDER is not None else True


def parse(body: bytes | str) -> list[Message]:
    """The messages of a relay frame; raises ValueError saying what is wrong."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"Body is not JSON: {exc}") from None
    items = data.get("messages") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ValueError("Body must be {\"messages\": [{\"group\", \"message\"}, ...]}.")
    messages: list[Message] = []
    for number, item in enumerate(items):
        group = item.get("group") if isinstance(item, dict) else None
        message = item.get("message") if isinstance(item, dict) else None
        if not isinstance(group, str) or not _GROUP.fullmatch(group):
            raise ValueError(f"Message {number}: group must be 'runs' or a run's "
                             "('run.<id>', 'run_<hash>').")
        if not isinstance(message, dict) or message.get("type") not in MESSAGE_TYPES:
            raise ValueError(f"Message {number}: type must be one of "
                             f"{', '.join(sorted(MESSAGE_TYPES))}.")
        messages.append((group, message))
    return messages


__all__ = ["HEADER", "Message", "drain", "key", "key_matches", "parse", "publish", "publish_sync"]
