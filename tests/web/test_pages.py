"""The placeholder pages through Django's test client."""

import pytest
from django.test import Client


def test_index_renders_title_and_stylesheet(client: Client) -> None:
    response = client.get("/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    body = response.content.decode()
    assert "<title>PicoFlow Web</title>" in body
    assert "/static/picoflow_web/css/app.css" in body
    assert 'href="/healthz"' in body


def test_healthz_returns_ok_json(client: Client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"status": "ok"}


@pytest.mark.parametrize("path", ["/", "/healthz"])
def test_head_is_allowed(client: Client, path: str) -> None:
    assert client.head(path).status_code == 200


@pytest.mark.parametrize("path", ["/", "/healthz"])
def test_post_is_rejected(client: Client, path: str) -> None:
    assert client.post(path).status_code == 405


def test_unknown_path_is_404(client: Client) -> None:
    assert client.get("/no-such-page").status_code == 404
