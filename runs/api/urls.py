from django.urls import path

from runs.api import pages
from runs.api.api import api

urlpatterns = [
    path("api/v1/", api.urls),
    path("account/tokens/", pages.tokens_page, name="api_tokens"),
    path("account/tokens/<int:token_id>/revoke/", pages.revoke, name="api_token_revoke"),
]
