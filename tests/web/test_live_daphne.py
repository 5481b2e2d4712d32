"""The ASGI application served by a real Daphne process over real HTTP."""

import json

from tests.livedaphne import SharedServer, live_daphne


def test_daphne_serves_index_healthz_and_static() -> None:
    with live_daphne() as server:
        status, headers, body = server.get("/")
        assert status == 200
        assert headers.get_content_type() == "text/html"
        assert b"PicoFlow Web" in body

        status, headers, body = server.get("/healthz")
        assert status == 200
        assert json.loads(body) == {"status": "ok"}

        status, headers, body = server.get("/static/picoflow_web/css/app.css")
        assert status == 200
        assert headers.get_content_type() == "text/css"
        assert b".pf-body" in body

        status, _, _ = server.get("/static/picoflow_web/css/missing.css")
        assert status == 404

    assert server.process.poll() is not None


def test_daphne_rejects_unknown_host(shared_daphne: SharedServer) -> None:
    status, _, _ = shared_daphne.server.get("/healthz", headers={"Host": "evil.example"})
    assert status == 400
