"""PicoFlow Web: the Django dashboard for the PicoFlow runtime."""

__version__ = "0.1.0"
