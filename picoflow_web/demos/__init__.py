"""Demo flows that ship with PicoFlow Web."""
