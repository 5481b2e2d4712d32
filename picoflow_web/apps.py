from django.apps import AppConfig


class PicoflowWebConfig(AppConfig):
    name = "picoflow_web"
    label = "picoflow_web"
    verbose_name = "PicoFlow Web"
    default_auto_field = "django.db.models.BigAutoField"
