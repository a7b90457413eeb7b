from django.urls import path

from .views import dataset, llm, records, report, site

app_name = "sandbox"
urlpatterns = [
    path("", report.report, name="report"),
    path("api/records", records.records, name="records"),
    path("api/records/stats", records.record_stats, name="record_stats"),
    path("api/notifications", records.notifications, name="notifications"),
    path("api/reset", records.reset, name="reset"),
    path("site/", site.index, name="site_index"),
    path("site/page/<int:n>", site.page, name="site_page"),
    path("site/generation", site.generation, name="site_generation"),
    path("site/generation/bump", site.generation_bump, name="site_generation_bump"),
    path("dataset/rows", dataset.rows, name="dataset_rows"),
    path("llm/v1/chat/completions", llm.chat_completions, name="llm_chat_completions"),
    path("llm/v1/models", llm.models, name="llm_models"),
]
