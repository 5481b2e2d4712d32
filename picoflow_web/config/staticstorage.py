"""The static files storage of the standalone site with ``DEBUG`` off."""

from __future__ import annotations

from whitenoise.storage import CompressedManifestStaticFilesStorage


# WhiteNoise ships no type hints: its base class is Any to mypy.
class CollectedStaticFilesStorage(CompressedManifestStaticFilesStorage):  # type: ignore[misc]
    """WhiteNoise's hashed, compressed copies (``collectstatic`` writes them and their
    manifest). A file the manifest does not list (nothing collected yet, or added since)
    keeps its plain URL, which WhiteNoise serves from the source folders when nothing is
    collected (``WHITENOISE_USE_FINDERS``), instead of failing the whole page."""

    def stored_name(self, name: str) -> str:
        try:
            return str(super().stored_name(name))
        except ValueError:
            return name
