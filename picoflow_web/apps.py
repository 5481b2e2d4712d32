from django.apps import AppConfig


class PicoflowWebConfig(AppConfig):
    name = "picoflow_web"
    label = "picoflow_web"
    verbose_name = "PicoFlow Web"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register the system checks (a bad ``PICOFLOW_FLOWS`` is an error) and the
        handler that revokes a user's tokens when they are deactivated or change password."""
        from picoflow_web import signals
        from picoflow_web.config import checks as _settings_checks  # noqa: F401
        from picoflow_web.execute import checks as _flow_checks  # noqa: F401

        signals.connect()
