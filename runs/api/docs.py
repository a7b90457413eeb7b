"""The API's Swagger UI, from this project's own static files (static/vendor/swagger-ui,
swagger-ui-dist from the npm registry, with its licence).

django-ninja renders its own page from its package's files only when "ninja" is an
installed app (else from a CDN, which the CSP and an offline machine refuse), and an
installed app is imported by every process at start-up: the whole package, pydantic
with it. That cost every worker tree, sweep and `manage.py` command 0.2 CPU-s and
12 MiB, for a page only Daphne serves (the test suite starts hundreds of them)."""

from __future__ import annotations

from django.shortcuts import render
from ninja.openapi.docs import DocsBase

SWAGGER_DEFAULTS = {"layout": "BaseLayout", "deepLinking": True}


class SwaggerUI(DocsBase):
    def __init__(self, settings: dict | None = None):
        self.settings = {**SWAGGER_DEFAULTS, **(settings or {})}

    def render_page(self, request, api, **kwargs):
        config = {**self.settings, "url": self.get_openapi_url(api, kwargs)}
        return render(request, "api/swagger.html", {"api": api, "swagger_settings": config})
