"""Schedule pages: the list, create, a schedule's page (edit, pause, delete, its
recent launches). Who may see which schedule is decided in selectors.py."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from runs.selectors import can_see_all

from . import selectors, services
from .forms import PauseForm, ScheduleForm


@login_required
def schedule_list(request):
    schedules = list(selectors.visible_schedules(request.user).select_related("last_run"))
    return render(request, "schedules/list.html", {
        "schedules": schedules, "all": can_see_all(request.user)})


@login_required
@require_http_methods(["GET", "POST"])
def schedule_new(request):
    form = ScheduleForm(data=request.POST or None, initial={"kind": "cron", "overlap": "skip"})
    if request.method == "POST" and form.is_valid():
        schedule = services.schedule_create(user=request.user, data=form.values())
        messages.success(request, f"Schedule {schedule.name} created.")
        return redirect(schedule)
    status = 422 if request.method == "POST" else 200
    return render(request, "schedules/form.html", {"form": form, "schedule": None},
                  status=status)


@login_required
@require_http_methods(["GET", "POST"])
def schedule_detail(request, schedule_id: int):
    schedule = selectors.schedule_get_for_user(request.user, schedule_id)
    form = ScheduleForm(data=request.POST or None, instance=schedule)
    if request.method == "POST" and form.is_valid():
        schedule = services.schedule_update(schedule=schedule, data=form.values())
        messages.success(request, f"Schedule {schedule.name} saved.")
        return redirect(schedule)
    status = 422 if request.method == "POST" else 200
    if request.method == "POST":  # show the schedule as stored, not as the bad form said
        schedule.refresh_from_db()
    return render(request, "schedules/form.html", {
        "form": form, "schedule": schedule,
        "launches": selectors.recent_launches(schedule)}, status=status)


@login_required
@require_POST
def schedule_pause(request, schedule_id: int):
    schedule = selectors.schedule_get_for_user(request.user, schedule_id)
    form = PauseForm(request.POST)
    if form.is_valid():
        paused = form.cleaned_data["paused"]
        services.schedule_set_paused(schedule=schedule, paused=paused)
        messages.success(request, f"Schedule {schedule.name} {'paused' if paused else 'resumed'}.")
    else:
        messages.error(request, "Say pause or resume.")
    return redirect("schedules:list")


@login_required
@require_POST
def schedule_delete(request, schedule_id: int):
    schedule = selectors.schedule_get_for_user(request.user, schedule_id)
    services.schedule_delete(schedule=schedule)
    messages.success(request, f"Schedule {schedule.name} deleted; its runs stay.")
    return redirect("schedules:list")
