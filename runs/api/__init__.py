"""The HTTP API under /api/v1/ (django-ninja), its personal tokens and their page.

Every endpoint calls runs/services.py, runs/selectors.py and runs/operator/ as the
pages do: the API adds authentication, scopes and JSON, never a rule of its own."""
