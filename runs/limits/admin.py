"""The admin of shared limits: edit them (a row wins over the settings), and see each
limit's state when the database keeps it."""

import time

from django.contrib import admin

from . import config
from .models import Limit, LimitState


@admin.register(Limit)
class LimitAdmin(admin.ModelAdmin):
    list_display = ["name", "describe", "enabled", "updated_at"]
    list_filter = ["enabled"]
    search_fields = ["name"]

    @admin.display(description="limit")
    def describe(self, obj):
        return obj.rule().describe()

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        config.forget()

    def delete_model(self, request, obj):
        super().delete_model(request, obj)
        config.forget()


@admin.register(LimitState)
class LimitStateAdmin(admin.ModelAdmin):
    """Read-only: the workers write it under its lock."""

    list_display = ["name", "in_flight", "waiting", "closed_until", "updated_at"]
    readonly_fields = ["name", "state", "version", "updated_at"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    @admin.display(description="calls in flight")
    def in_flight(self, obj):
        now = time.time()
        return sum(1 for g in obj.state.get("grants", []) if not g["done"] and g["until"] > now)

    @admin.display(description="waiting")
    def waiting(self, obj):
        return len(obj.state.get("waiters", {}))

    @admin.display(description="closed until (Retry-After)")
    def closed_until(self, obj):
        until = obj.state.get("closed_until") or 0
        return time.strftime("%H:%M:%S UTC", time.gmtime(until)) if until > time.time() else "-"
