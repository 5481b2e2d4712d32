from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured


class PicoflowWebConfig(AppConfig):
    name = "picoflow_web"
    label = "picoflow_web"
    verbose_name = "PicoFlow Web"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Build the engine now: a bad ``PICOFLOW_FLOWS`` stops every command and Daphne
        at start-up, with a message naming the entry and the reason."""
        from picoflow_web.engine import get_engine
        from picoflow_web.flows import FlowsConfigError
        from runtime import PicoFlowError

        try:
            get_engine()
        except FlowsConfigError:
            raise
        except PicoFlowError as exc:  # a flow's model_providers(), OPENAI_BASE_URL
            raise ImproperlyConfigured(f"The flow engine cannot be built: {exc}") from exc
