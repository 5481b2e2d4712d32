"""The blocking transport: one ``urllib`` POST per call, in a worker thread.

Kept for endpoints behind an ``HTTP(S)_PROXY`` (urllib honours the proxy variables; the
pooled transport does not), and as the baseline of ``bench/model_fanout.py``. It opens a
connection per call, and anyio's worker threads (40 by default) cap how many calls a
process has in flight. A cancelled call abandons its thread instead of waiting for the
socket.
"""

from __future__ import annotations

import functools
import http.client
import urllib.error
import urllib.request
from typing import Any

import anyio.to_thread

from .http_pool import HTTPTimeout, HTTPTransportError


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuse redirects.

    urllib would turn a redirected POST into a body-less GET and carry the
    ``Authorization`` header to whatever host the redirect names; a misconfigured
    ``base_url`` should fail loudly instead.
    """

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


async def post_in_thread(
    url: str, payload: bytes, headers: dict[str, str], timeout: float
) -> tuple[int, dict[str, str], bytes]:
    """POST in a worker thread; the status, headers (lower-cased) and body of any reply.

    Raises:
        HTTPTimeout: the socket timed out.
        HTTPTransportError: no reply at all.
    """
    return await anyio.to_thread.run_sync(
        functools.partial(_post, url, payload, headers, timeout), abandon_on_cancel=True
    )


def _post(
    url: str, payload: bytes, headers: dict[str, str], timeout: float
) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, data=payload, headers=headers, method="POST")
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return int(resp.status), _lower(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        try:
            raw = exc.read()
        except (OSError, http.client.HTTPException):
            raw = b""
        finally:
            exc.close()
        return exc.code, _lower(exc.headers), raw
    except TimeoutError:
        raise HTTPTimeout(f"timed out after {timeout:g}s") from None
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):
            raise HTTPTimeout(f"timed out after {timeout:g}s") from None
        raise HTTPTransportError(str(exc.reason)) from None
    except (OSError, http.client.HTTPException) as exc:
        raise HTTPTransportError(f"{type(exc).__name__}: {exc}") from None


def _lower(headers: Any) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in (headers or {}).items()}
