"""Hotel booking demo: plain-code backend for searching, comparing and booking hotels."""
