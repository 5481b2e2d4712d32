"""Configuration: settings, environment variables, the app's settings, checks."""
