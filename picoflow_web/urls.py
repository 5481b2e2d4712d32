"""HTTP routes of the app.

A project includes them at its root (the pages' scripts call ``/api/...`` and ``/ws/...``
there): ``path("", include("picoflow_web.urls"))``. The standalone site
(``picoflow_web.config.site_urls``) adds the admin.
"""

from django.contrib.auth import views as auth_views
from django.urls import path

from picoflow_web.http import (
    analysis,
    api,
    openapi,
    otlp_receiver,
    tokens_page,
    transfer,
    views,
)

urlpatterns = [
    path("", views.index, name="index"),
    path("runs/<str:run_id>/", views.run_page, name="run"),
    path("runs/<str:run_a>/compare/<str:run_b>/", views.compare_page, name="compare"),
    path("sessions/<str:session_id>/", views.session_page, name="session"),
    path("healthz", views.healthz, name="healthz"),
    path("tokens/", tokens_page.tokens_index, name="tokens-index"),
    path("projects/<str:project>/tokens/", tokens_page.project_tokens, name="tokens"),
    path("projects/<str:project>/tokens/<int:token_id>/revoke", tokens_page.revoke_token,
         name="token-revoke"),
    path("login/", views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/openapi.json", openapi.openapi_json, name="api-openapi"),
    path("api/docs", views.api_docs, name="api-docs"),
    path("api/flows", api.flows, name="api-flows"),
    path("api/runs", api.runs, name="api-runs"),
    path("api/runs/<str:run_id>", api.run_detail, name="api-run"),
    path("api/runs/<str:run_id>/events", api.run_events, name="api-run-events"),
    path("api/runs/<str:run_id>/cancel", api.run_cancel, name="api-run-cancel"),
    path("api/runs/<str:run_id>/resume", api.run_resume, name="api-run-resume"),
    path("api/runs/<str:run_id>/otlp", api.run_otlp, name="api-run-otlp"),
    path("api/runs/<str:run_id>/whatif", analysis.run_whatif, name="api-run-whatif"),
    path("api/runs/<str:run_id>/compare/<str:other_id>", analysis.run_compare,
         name="api-run-compare"),
    path("api/runs/<str:run_id>/export", transfer.run_export, name="api-run-export"),
    path("api/sessions/<str:session_id>", api.session_detail, name="api-session"),
    path("api/sessions/<str:session_id>/export", transfer.session_export,
         name="api-session-export"),
    path("api/import", transfer.import_events, name="api-import"),
    path("api/ingest", api.ingest_events, name="api-ingest"),
    path("api/ingest/heartbeat", api.ingest_heartbeat, name="api-ingest-heartbeat"),
    path("api/ingest/control", api.ingest_control, name="api-ingest-control"),
    path("ai/run", api.ai_run, name="ai-run"),
    path("ai/flows", api.ai_flows, name="ai-flows"),
    path("ai/end", api.ai_end, name="ai-end"),
    path("v1/traces", otlp_receiver.traces, name="otlp-traces"),
]

# Errors outside views answer in the API's JSON shape under /api/, /ai/ and /v1/. Django reads
# these from the root URLconf only: a project including this one adds
# picoflow_web.http.error_answers.JsonErrorsMiddleware instead.
handler400 = "picoflow_web.http.error_answers.bad_request"
handler404 = "picoflow_web.http.error_answers.not_found"
handler500 = "picoflow_web.http.error_answers.server_error"
