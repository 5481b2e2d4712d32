"""Flows that are not demos, served by the dashboard through ``PICOFLOW_FLOWS`` in tests."""
