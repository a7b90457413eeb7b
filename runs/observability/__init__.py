"""Observability: Prometheus metrics, OpenTelemetry traces and structured logs.

The engine (runs/durable/) calls the hooks of runs/durable/observe.py; this package
is the worker side of them (observer.py) and everything around it: the metrics
(metrics.py, collector.py), /metrics and its guard (views.py, guard.py), traces
(tracing.py, links.py, middleware.py), websocket viewers (asgi.py) and the log
format (logs.py). docs/observability.md describes what an operator sees.
"""

