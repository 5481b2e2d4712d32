"""The door events enter by, from every source: stored in order, counted, broadcast."""
