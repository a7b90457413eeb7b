from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("ops/", include("runs.operator_urls")),
    path("", include("runs.urls")),
]

if settings.AGENTOPS["SANDBOX"]:  # local mode, or AGENTOPS_SANDBOX=1 (docs/security.md)
    urlpatterns.insert(0, path("sandbox/", include("sandbox.urls")))

handler400 = "runs.views.errors.bad_request"
