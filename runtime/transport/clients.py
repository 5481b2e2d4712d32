"""HTTP on httpx2 for the runtime's own requests: children of ``concurrent_steps()`` and a
dashboard sink's batches, heartbeats and stop long-poll.

Both follow no redirect (a 3xx is an answer like any other: a request is never sent
somewhere else with its token), verify TLS against the system's certificate store (the
``ssl`` module's default context, which honours ``SSL_CERT_FILE`` and ``SSL_CERT_DIR``), and
go through the proxy the environment names for the URL (``HTTP_PROXY``, ``HTTPS_PROXY``,
``ALL_PROXY``, with ``NO_PROXY`` for the hosts that bypass it), as ``pip`` and the
``openai`` SDK do.

:class:`ChildPoster` is an ``httpx2.AsyncClient``: anyio underneath, so a coordinator runs
on asyncio or trio. :class:`IngestTransport` is an ``httpx2.HTTPTransport`` (httpx2's
connection pool, without the client's per-request machinery: cookies, auth, redirects, URL
merging) with one keep-alive connection, owned by the sink thread that sends on it: the
thread competes with the run for the interpreter, so what it does per request counts.
"""

from __future__ import annotations

import functools
import ssl
import urllib.parse
import urllib.request
from collections.abc import Mapping

import httpx2

from ..concurrent import ChildNotSent, ChildSendError, ChildTimeout

_CHILD_LIMITS = httpx2.Limits(max_connections=512, max_keepalive_connections=256,
                             keepalive_expiry=15.0)
"""One coordinator call's connections: a batch's children share them; the bound only keeps
an unbounded batch from running out of file descriptors."""


@functools.cache
def _tls() -> ssl.SSLContext:
    # Loading the certificate store takes milliseconds: once per process, shared by every
    # client (an SSLContext is safe to share between threads).
    return ssl.create_default_context()


def _describe(exc: httpx2.RequestError) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def env_proxy(url: str) -> str | None:
    """The proxy the environment names for ``url`` (None: connect directly), read as the
    standard library reads it (``urllib.request.getproxies`` and ``proxy_bypass``)."""
    parts = urllib.parse.urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    return proxy


class ChildPoster:
    """The POSTs of one ``concurrent_steps()`` call to ``url``, on keep-alive connections
    of the event loop it runs on (close it before the call returns: a socket belongs to its
    loop)."""

    def __init__(self, url: str) -> None:
        # The proxy is chosen here as for IngestTransport, not by httpx2's own reading of
        # the environment: one rule for every request the runtime sends.
        self._client = httpx2.AsyncClient(verify=_tls(), trust_env=False, proxy=env_proxy(url),
                                         follow_redirects=False, limits=_CHILD_LIMITS)

    async def post(self, url: str, *, headers: Mapping[str, str], body: bytes,
                   timeout: float) -> tuple[int, Mapping[str, str], bytes]:
        """Status, headers (looked up in any case) and body of the reply.

        Raises:
            ChildTimeout: connecting, or a wait for the reply, took more than ``timeout``.
            ChildNotSent: no connection could be opened: nothing was sent.
            ChildSendError: any other failure to get a reply (the request may have been
                processed).
        """
        try:
            response = await self._client.post(url, content=body, headers=dict(headers),
                                               timeout=timeout)
        except httpx2.TimeoutException:
            raise ChildTimeout(f"no reply within {timeout:g}s") from None
        except httpx2.ConnectError as exc:
            raise ChildNotSent(_describe(exc)) from None
        except httpx2.RequestError as exc:  # a reply that could not be read counts too
            raise ChildSendError(_describe(exc)) from None
        return response.status_code, response.headers, response.content

    async def aclose(self) -> None:
        await self._client.aclose()


class IngestTransport:
    """One sink thread's requests to a dashboard at ``origin``, on one keep-alive
    connection; ``headers`` go with every request."""

    def __init__(self, origin: str, headers: Mapping[str, str], timeout: float) -> None:
        self._transport = httpx2.HTTPTransport(
            verify=_tls(), proxy=env_proxy(origin),
            limits=httpx2.Limits(max_connections=1, max_keepalive_connections=1))
        self._headers = dict(headers)
        self._timeout = httpx2.Timeout(timeout).as_dict()

    def request(self, method: str, url: str, *, body: bytes | None = None,
                headers: Mapping[str, str] | None = None
                ) -> tuple[int, Mapping[str, str], bytes]:
        """Status, headers (looked up in any case) and body; OSError when no reply came
        (refused, reset, timed out, not HTTP)."""
        request = httpx2.Request(method, url, content=body,
                                headers={**self._headers, **headers} if headers
                                else self._headers,
                                extensions={"timeout": self._timeout})
        try:
            response = self._transport.handle_request(request)
            try:
                response.read()
            finally:
                response.close()
        except httpx2.RequestError as exc:  # a reply that could not be read counts too
            raise OSError(_describe(exc)) from exc
        return response.status_code, response.headers, response.content

    def close(self) -> None:
        self._transport.close()
