"""The user's pages: my runs, launch, and the live run page (with its partials)."""

from runs.web.views.actions import run_cancel, run_input
from runs.web.views.pages import launch, run_detail, run_list
from runs.web.views.partials import (
           checkpoint_detail,
           events_older,
           output_json,
           run_panels,
           run_rows,
)

__all__ = ["checkpoint_detail", "events_older", "launch", "output_json", "run_cancel",
           "run_detail", "run_input", "run_list", "run_panels", "run_rows"]
