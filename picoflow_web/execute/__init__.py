"""Executing runs: services, the task queue, workers' leases, the engine and its flows."""
