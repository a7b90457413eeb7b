"""The sandbox's audit page: what reached the outside world, and how often."""

from django.shortcuts import render
from django.views.decorators.http import require_GET

from .. import selectors


@require_GET
def report(request):
    return render(request, "sandbox/report.html", {"report": selectors.report()})
