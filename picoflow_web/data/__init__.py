"""Reads and stored shapes: the event log, session documents, selectors, queries, redaction."""
