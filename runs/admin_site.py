"""The admin site every ModelAdmin is registered on, ours and our dependencies'
(django-axes, django-q2, django.contrib.auth): Django's default site, made from
`AdminConfig.default_site` (INSTALLED_APPS names AgentopsAdminConfig instead of
django.contrib.admin).

What it adds: a changelist's POST whose selected ids (`_selected_action`) are not
values of the model's primary key is a 400 that changes nothing. Django runs an
action on `queryset.filter(pk__in=selected)`, and a value the key cannot hold (a
32-character hex id for an integer key) raises ValueError there: a 500 on every
changelist with an action. The check is made once here for every registered model,
since a model admin of a dependency cannot be edited."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.exceptions import ValidationError
from django.http import HttpResponseBadRequest


def unfit_ids(model, values: list[str]) -> list[str]:
    """The values that are not a possible primary key of `model` (the key field's own
    parsing and validators: a number in range, a string within its length...)."""
    key = model._meta.pk
    unfit = []
    for value in values:
        try:
            key.run_validators(key.to_python(value))
        except ValidationError:
            unfit.append(value)
    return unfit


class CheckedSelectionMixin:
    def changelist_view(self, request, extra_context=None):
        if request.method == "POST":
            unfit = unfit_ids(self.model, request.POST.getlist(ACTION_CHECKBOX_NAME))
            if unfit:
                name = self.model._meta.verbose_name_plural
                return HttpResponseBadRequest(
                    f"Nothing was changed: {unfit[0][:40]!r} is not an id of {name}.",
                    content_type="text/plain; charset=utf-8")
        return super().changelist_view(request, extra_context)


class AgentopsAdminSite(admin.AdminSite):
    site_header = site_title = "agentops administration"

    def register(self, model_or_iterable, admin_class=None, **options):
        admin_class = admin_class or admin.ModelAdmin
        if not issubclass(admin_class, CheckedSelectionMixin):
            admin_class = type(admin_class.__name__, (CheckedSelectionMixin, admin_class),
                               {"__module__": admin_class.__module__})
        super().register(model_or_iterable, admin_class, **options)


class AgentopsAdminConfig(AdminConfig):
    default_site = "runs.admin_site.AgentopsAdminSite"
