from django.contrib import admin

from .forms import SubscriptionForm
from .models import Attempt, Delivery, Subscription


class AdminSubscriptionForm(SubscriptionForm):
    """The page's form (the URL checked alike); the dispatcher still sends "all" only to
    an owner who is an operator."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("may_subscribe_to_all", True)
        super().__init__(*args, **kwargs)


@admin.register(Subscription)
class SubscriptionAdmin(admin.ModelAdmin):
    form = AdminSubscriptionForm
    list_display = ("url", "owner", "scope", "active", "created_at")
    list_filter = ("active", "scope")
    search_fields = ("url", "owner__username", "description")
    exclude = ("secret",)  # shown to its owner on their page, not to every admin user


class AttemptInline(admin.TabularInline):
    model = Attempt
    extra = 0
    can_delete = False
    fields = readonly_fields = ("number", "started_at", "status_code", "duration_ms", "error",
                                "response_body")

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    """Read-only: deliveries are made by the dispatcher and their runs."""

    list_display = ("msg_id", "subscription", "event_type", "run", "status", "attempts",
                    "created_at")
    list_filter = ("status", "event_type")
    inlines = [AttemptInline]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
