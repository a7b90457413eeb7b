from django.contrib import admin

from . import services
from .forms import ScheduleForm
from .models import Schedule, ScheduleLaunch


class LaunchInline(admin.TabularInline):
    model = ScheduleLaunch
    extra = 0
    can_delete = False
    fields = readonly_fields = ("slot_at", "outcome", "run", "missed", "detail")
    ordering = ("-slot_at",)

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    # the same form as the page: the cron, the interval and the inputs checked alike
    form = ScheduleForm
    list_display = ("name", "owner", "agent", "timing", "overlap", "paused", "next_at")
    list_filter = ("paused", "kind", "overlap", "agent")
    search_fields = ("name", "agent", "owner__username")
    readonly_fields = ("next_at", "queued_slot", "last_run", "created_at", "updated_at")
    inlines = [LaunchInline]
    actions = ["pause", "resume"]

    def get_fields(self, request, obj=None):
        fields = list(ScheduleForm.Meta.fields)
        return (["owner"] if obj is None else []) + fields + list(self.readonly_fields)

    def get_form(self, request, obj=None, change=False, **kwargs):
        kwargs["fields"] = [f for f in self.get_fields(request, obj)
                            if f not in self.readonly_fields]
        return super().get_form(request, obj, change, **kwargs)

    def save_model(self, request, obj, form, change):
        data = {k: form.cleaned_data[k] for k in ScheduleForm.Meta.fields
                if k in form.cleaned_data}
        if change:
            services.schedule_update(schedule=obj, data=data)
        else:
            services.schedule_create(user=form.cleaned_data["owner"], data=data, instance=obj)

    @admin.action(description="Pause the selected schedules")
    def pause(self, request, queryset):
        for schedule in queryset:
            services.schedule_set_paused(schedule=schedule, paused=True)

    @admin.action(description="Resume the selected schedules")
    def resume(self, request, queryset):
        for schedule in queryset:
            services.schedule_set_paused(schedule=schedule, paused=False)
