from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from runs.observability.views import metrics_view

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("metrics", metrics_view, name="metrics"),
    path("", include("runs.budgets.urls")),  # before ops/: it has ops/budgets/
    path("ops/", include("runs.operator.urls")),
    path("", include("runs.api.urls")),  # /api/v1/ and the tokens page (docs/api.md)
    path("webhooks/", include("runs.webhooks.urls")),
    path("schedules/", include("runs.schedules.urls")),
    path("", include("runs.web.urls")),
]

if settings.AGENTOPS["SANDBOX"]:  # local mode, or AGENTOPS_SANDBOX=1 (docs/security.md)
    urlpatterns.insert(0, path("sandbox/", include("sandbox.urls")))

handler400 = "runs.web.views.errors.bad_request"
