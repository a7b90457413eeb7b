"""The sandbox's rows in the admin: evidence, so read-only (deletable for cleanup)."""

from django.contrib import admin

from .models import IdempotencyKey, KeyCall, Notification, PageHit, Record, SiteGeneration


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Record)
class RecordAdmin(ReadOnlyAdmin):
    list_display = ("id", "key", "unit", "created_at")
    search_fields = ("key", "unit")
    date_hierarchy = "created_at"


@admin.register(IdempotencyKey)
class IdempotencyKeyAdmin(ReadOnlyAdmin):
    list_display = ("key", "state", "response_status", "claimed_at", "completed_at")
    list_filter = ("state",)
    search_fields = ("key", "request_digest")


@admin.register(KeyCall)
class KeyCallAdmin(ReadOnlyAdmin):
    list_display = ("key", "calls", "replays", "conflicts", "mismatches", "rejected", "last_seen")
    search_fields = ("key",)
    ordering = ("-calls", "key")


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    list_display = ("id", "unit", "idempotency_key", "created_at")
    search_fields = ("unit", "idempotency_key")


@admin.register(SiteGeneration)
class SiteGenerationAdmin(ReadOnlyAdmin):
    list_display = ("id", "generation", "bumped_at")


@admin.register(PageHit)
class PageHitAdmin(ReadOnlyAdmin):
    list_display = ("page", "hits")
    search_fields = ("=page",)
