"""Settings, read from the environment with safe local defaults.

No variable set means local mode: SQLite (WAL) in ./var, the django-q2 ORM broker, an
in-process channel layer plus database polling for live pages, the sandbox mounted.
Production sets DATABASE_URL (PostgreSQL), REDIS_URL (channels-redis), ALLOWED_HOSTS
and a SECRET_KEY, which turns on the deployment defaults (docs/security.md).
"""

import json
import os
import sys
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("AGENTOPS_VAR_DIR", BASE_DIR / "var"))


def env_bool(name, default=False):
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name, default):
    return int(os.environ.get(name, default))


def env_float(name, default):
    return float(os.environ.get(name, default))


def env_list(name, default=""):
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


# --- local mode or a deployment (docs/security.md) ---------------------------------------
# Local mode (bin/serve, bin/test, a laptop) is neither SECRET_KEY nor ALLOWED_HOSTS set:
# only loopback host names are served, cookies travel over plain HTTP and the sandbox is
# mounted. Either variable set means a deployment: a real SECRET_KEY is required, cookies
# are Secure, HTTPS is enforced (redirect + HSTS) and the sandbox is off unless
# AGENTOPS_SANDBOX=1. A deployment has to set ALLOWED_HOSTS to be reachable by its name.
LOCAL = not os.environ.get("SECRET_KEY") and not os.environ.get("ALLOWED_HOSTS")
LOCAL_SECRET_KEY = "insecure-local-only-key-set-SECRET_KEY-in-production"
DEBUG = env_bool("DEBUG", False)
SECRET_KEY = LOCAL_SECRET_KEY if LOCAL else os.environ.get("SECRET_KEY", "")
if not LOCAL and (len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5
                  or SECRET_KEY == LOCAL_SECRET_KEY or SECRET_KEY.startswith("django-insecure")):
    raise ImproperlyConfigured(
        "a deployment (ALLOWED_HOSTS or SECRET_KEY set) needs SECRET_KEY: a random value of "
        "at least 50 characters, e.g. python -c 'import secrets; print(secrets.token_urlsafe(50))'")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

# Daphne's app is there for `manage.py runserver` only (it serves ASGI, websockets
# included); bin/serve and the Procfile run Daphne itself. In every process it made each
# one import Daphne's server and Twisted: Django's set-up took 1.1 s of CPU here, 0.72 s
# without them, at every start of a worker, a command or a test process.
SERVES_ASGI_FOR_RUNSERVER = sys.argv[1:2] == ["runserver"]
INSTALLED_APPS = [
    *(["daphne"] if SERVES_ASGI_FOR_RUNSERVER else []),
    "runs",  # before django_q: runs overrides the qcluster command (signal hand-off, sweep)
    "runs.api",  # the HTTP API, its tokens and idempotency keys (docs/api.md)
    "runs.budgets",  # budgets, the ledger, approvals (docs/budgets.md, docs/approvals.md)
    "runs.limits",  # shared limits per tool or provider (docs/limits.md)
    "sandbox",
    "builtin_agents",
    "runs.webhooks",  # subscriptions and their deliveries (docs/webhooks.md)
    "runs.schedules",  # agents launched on a cron expression or an interval (docs/schedules.md)
    "runs.observability",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "django_q",
    "csp",
    "axes",
    "ninja",  # the API's browsable docs: Swagger UI from the package's own static files
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "runs.observability.middleware.TraceRequestMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "runs.web.query_guard.RefuseNulMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "runs.web.middleware.DatabaseUnavailableMiddleware",
    "axes.middleware.AxesMiddleware",  # last: it turns a lockout into the login page
]

ROOT_URLCONF = "agentops.urls"
ASGI_APPLICATION = "agentops.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
            # The operator side keeps its display helpers in its own folder (runs/operator/),
            # which is not an app of its own: registered here by name.
            "libraries": {"operator_ui": "runs.operator.display"},
        },
    },
]

# --- database -------------------------------------------------------------
# The qcluster process forks its workers, and forked children must not share a
# connection pool (seen: lost results and hung shutdowns), so the pool is only switched on for web
# processes (AGENTOPS_DB_POOL=1 in the Procfile's web line). Each qcluster worker
# process makes a pool of its own after the fork (runs/worker/db.py).
DATABASE_URL = os.environ.get("DATABASE_URL", "")
# A pool that cannot connect retries with a doubling delay (1, 2, 4, 8 s...), which
# after an outage kept requests and runs waiting for its next try long after the
# database was back. Giving up a try after this long bounds that wait: the next
# request for a connection starts a new one at once.
DB_POOL_RECONNECT_SECONDS = env_float("AGENTOPS_DB_RECONNECT_SECONDS", 5.0)
if DATABASE_URL:
    # Health checks: a connection is checked before it is handed out (from the pool, or
    # reused by a request), so one that a database restart or pg_terminate_backend ended
    # is replaced instead of failing the request (docs/database-faults.md).
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0,
                                                  conn_health_checks=True)}
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        # A database that does not answer fails a connection attempt after this
        # long, and a dead peer is noticed by TCP keepalives, not never.
        DATABASES["default"]["OPTIONS"] = {
            "connect_timeout": env_int("AGENTOPS_DB_CONNECT_TIMEOUT", 5),
            "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
            "keepalives_count": 3,
        }
        if env_bool("AGENTOPS_DB_POOL") and "qcluster" not in sys.argv:
            # a request waits this long for a connection, then gets a 503 (runs/web/middleware.py)
            DATABASES["default"]["OPTIONS"]["pool"] = {
                "min_size": 2, "max_size": 20,
                "timeout": env_float("AGENTOPS_DB_POOL_TIMEOUT", 10.0),
                "reconnect_timeout": DB_POOL_RECONNECT_SECONDS}
        else:
            DATABASES["default"]["CONN_MAX_AGE"] = 60
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("SQLITE_PATH", str(VAR_DIR / "agentops.sqlite3")),
            # Kept open between requests and polls, as on PostgreSQL: opened anew for
            # each of the pusher's polls (ten a second) and the sweep's ticks, with its
            # PRAGMAs, an idle cluster took 2.0 s of CPU in 30 s; 1.1 s kept open.
            "CONN_MAX_AGE": 60,
            "OPTIONS": {
                # IMMEDIATE turns lock upgrades between web and worker into short waits.
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            },
        }
    }
DATABASES["default"].setdefault("TEST", {})
# Test databases are per test session (several sessions may run side by side), and
# for SQLite a file, not :memory:, so worker and server processes started by tests
# share it.
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["TEST"]["NAME"] = str(VAR_DIR / f"test-agentops-{os.getpid()}.sqlite3")
else:
    DATABASES["default"]["TEST"]["NAME"] = f"test_{DATABASES['default']['NAME']}_{os.getpid()}"
if os.environ.get("AGENTOPS_TEST_DB_NAME"):
    DATABASES["default"]["TEST"]["NAME"] = os.environ["AGENTOPS_TEST_DB_NAME"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
IS_POSTGRES = DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"

# --- channels -------------------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            # Pub/sub: the layer only carries wake-ups ("run X moved"), which need no
            # buffering; pushed messages arrive in bulk, where the core layer's one
            # BZPOPMIN per message capped a busy Daphne at a few hundred wake-ups a
            # second (bench/fanout.py: p50 225 ms → 12 ms with 500 viewers). The socket
            # timeout is explicit: redis-py 8 defaults it to 5 s (channels_redis#422).
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 15}],
                       # several deployments (or CI's test streams) on one Redis: its
                       # pub/sub channels are not per database number
                       "prefix": os.environ.get("AGENTOPS_CHANNEL_PREFIX", "asgi")},
        }
    }
else:
    # Does not cross processes: live pages fall back to polling the event table.
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# --- django-q2 --------------------------------------------------------------
# The ORM broker: with the Redis broker a SIGKILLed worker's task is lost
# (seen on this stack). The run's lease, not the broker, decides who runs a run, so a
# re-delivered task is harmless. timeout < retry, or django-q2 re-delivers
# running tasks; runs yield after AGENTOPS_TIME_SLICE seconds, far below both.
# Worker processes: one per core (at least two). Concurrency for I/O comes from the
# runs each process holds in threads (AGENTOPS_RUNS_PER_WORKER), not from processes.
AGENTOPS_WORKERS = env_int("AGENTOPS_WORKERS", max(2, os.cpu_count() or 2))
Q_CLUSTER = {
    "name": os.environ.get("Q_CLUSTER_NAME", "agentops"),
    "orm": "default",
    # the ORM broker, whose pusher waits out a database fault instead of stopping 10 s
    "broker_class": "runs.worker.broker.ReconnectingORM",
    "workers": AGENTOPS_WORKERS,
    "timeout": env_int("AGENTOPS_TASK_TIMEOUT", 600),
    "retry": env_int("AGENTOPS_TASK_RETRY", 660),
    "max_attempts": 1,
    "poll": env_float("AGENTOPS_POLL", 0.1),
    "save_limit": 200,
    "ack_failures": True,
    "catch_up": False,
    "recycle": 1000,
    "guard_cycle": 0.5,
    # one spare task per worker: a frozen worker's cluster can strand only a few
    "queue_limit": AGENTOPS_WORKERS,
    "bulk": 1,
}

# --- agentops engine ------------------------------------------------------
AGENTOPS = {
    "LEASE_SECONDS": env_float("AGENTOPS_LEASE_SECONDS", 4.0),
    "TIME_SLICE_SECONDS": env_float("AGENTOPS_TIME_SLICE", 5.0),
    # the slice of a run claimed while no other run waits for a slot (runs/worker/execute.py)
    "UNCONTENDED_SLICE_SECONDS": env_float("AGENTOPS_UNCONTENDED_SLICE", 20.0),
    "SWEEP_INTERVAL": env_float("AGENTOPS_SWEEP_INTERVAL", 0.5),
    "REQUEUE_AFTER_SECONDS": env_float("AGENTOPS_REQUEUE_AFTER", 60.0),
    "REQUEUE_STUCK_SECONDS": env_float("AGENTOPS_REQUEUE_STUCK", 3.0),
    "CRASH_LOOP_LIMIT": env_int("AGENTOPS_CRASH_LOOP_LIMIT", 3),
    # Runs one worker process holds at once, each in a thread, so that steps that wait
    # on I/O (model calls, HTTP) overlap (runs/worker/execute.py). They share a pool of
    # WORKER_DB_POOL_SIZE connections per process on PostgreSQL (runs/worker/db.py), so
    # 1,000 runs take ~20 connections. SQLite serialises writers: a small number.
    # The price: one SIGKILL crashes every run of the process at once, which counts
    # towards each run's crash-loop guard. 1 = one run per process, no threads.
    "RUNS_PER_WORKER": env_int("AGENTOPS_RUNS_PER_WORKER", 500 if IS_POSTGRES else 16),
    "WORKER_DB_POOL_SIZE": env_int("AGENTOPS_WORKER_DB_POOL", 10),
    # how long a run's thread waits for a pooled connection before its step fails
    "WORKER_DB_POOL_TIMEOUT": env_float("AGENTOPS_WORKER_DB_POOL_TIMEOUT", 30.0),
    "DB_POOL_RECONNECT_SECONDS": DB_POOL_RECONNECT_SECONDS,
    # a task hosting runs stops claiming after this, well inside the task timeout
    "WORKER_TASK_SECONDS": env_float("AGENTOPS_WORKER_TASK_SECONDS", 300.0),
    # how long a stopping qcluster waits for its processes before killing them
    "SHUTDOWN_GRACE_SECONDS": env_float("AGENTOPS_SHUTDOWN_GRACE", 20.0),
    # The self-healing worker tree (runs/worker/cluster/, docs/workers.md): how long work may
    # wait while every worker is idle before the sentinel replaces its generation; how
    # long the sentinel's guard loop and the qcluster main may stay silent before the
    # process above them replaces them.
    "WATCHDOG_SECONDS": env_float("AGENTOPS_WATCHDOG_SECONDS", 3.0),
    "SENTINEL_STALE_SECONDS": env_float("AGENTOPS_SENTINEL_STALE", 10.0),
    "MAIN_STALE_SECONDS": env_float("AGENTOPS_MAIN_STALE", 30.0),
    # ... and how long a starting main may take to report for the first time
    "MAIN_START_SECONDS": env_float("AGENTOPS_MAIN_START_TIMEOUT", 120.0),
    # checkpoint retention: the latest N per branch of ended runs, after a grace period
    "RETENTION_KEEP_PER_BRANCH": env_int("AGENTOPS_RETENTION_KEEP", 3),
    "RETENTION_GRACE_HOURS": env_float("AGENTOPS_RETENTION_GRACE_HOURS", 24.0),
    # Expire at once the lease of a dead worker process on this host (else: wait
    # for the lease to run out, as for a worker on another host).
    "DETECT_DEAD_LOCAL_WORKERS": env_bool("AGENTOPS_DETECT_DEAD_LOCAL_WORKERS", True),
    # When a queued or running run shows as stalled (runs/worker/stalls.py, docs/stalls.md):
    # queued and unclaimed this long; silent this long (an agent's expected_cadence
    # overrides it). A run whose lease ran out is stalled one lease period later.
    "STALL_UNCLAIMED_SECONDS": env_float("AGENTOPS_STALL_UNCLAIMED", 60.0),
    "EXPECTED_CADENCE_SECONDS": env_float("AGENTOPS_EXPECTED_CADENCE", 300.0),
    "AGENT_MODULES": env_list("AGENTOPS_AGENT_MODULES"),
    "FAULTS_DIR": os.environ.get("AGENTOPS_FAULTS_DIR", ""),
    "LIVE_POLL_SECONDS": env_float("AGENTOPS_LIVE_POLL", 0.5),
    # The operator pages poll this often only while their websocket is down (docs/operator-live.md).
    "OPS_POLL_SECONDS": env_float("AGENTOPS_OPS_POLL", 3.0),
    "MAX_INPUT_BYTES": env_int("AGENTOPS_MAX_INPUT_BYTES", 256 * 1024),
    # the sandbox app's URLs (the outside world of the built-in agents): local mode only,
    # unless asked for; `manage.py sandbox reset|bump-generation` work either way
    "SANDBOX": env_bool("AGENTOPS_SANDBOX", LOCAL),
    "SANDBOX_URL": os.environ.get("AGENTOPS_SANDBOX_URL", "http://127.0.0.1:8000/sandbox"),
    "LLM_BASE_URL": os.environ.get("AGENTOPS_LLM_BASE_URL", ""),
    "LLM_MODEL": os.environ.get("AGENTOPS_LLM_MODEL", "scripted"),
    "LLM_API_KEY": os.environ.get("AGENTOPS_LLM_API_KEY", ""),
    # The built-in HTTP and LLM tools' retry policy (docs/retries.md): transient
    # errors are retried for this long, with waits growing up to the maximum.
    "TOOL_RETRY_FOR_SECONDS": env_float("AGENTOPS_TOOL_RETRY_FOR", 3600.0),
    "TOOL_RETRY_MAX_INTERVAL": env_float("AGENTOPS_TOOL_RETRY_MAX_INTERVAL", 30.0),
    # The HTTP API (docs/api.md): how long an Idempotency-Key holds its run, the event
    # stream's heartbeat (a comment line, so proxies keep the connection), and the
    # longest a token may live.
    "API_IDEMPOTENCY_HOURS": env_float("AGENTOPS_API_IDEMPOTENCY_HOURS", 48.0),
    "API_SSE_HEARTBEAT_SECONDS": env_float("AGENTOPS_API_SSE_HEARTBEAT", 15.0),
    "API_TOKEN_MAX_DAYS": env_int("AGENTOPS_API_TOKEN_MAX_DAYS", 365),
    # Observability (docs/observability.md). /metrics answers a bearer token or an address
    # in the allow-list (IPs or CIDR networks); with neither it does not exist (404).
    "METRICS": env_bool("AGENTOPS_METRICS", True),
    "METRICS_TOKEN": os.environ.get("AGENTOPS_METRICS_TOKEN", ""),
    "METRICS_ALLOW": env_list("AGENTOPS_METRICS_ALLOW"),
    # The price table (docs/budgets.md): dollars per million tokens by model, as JSON
    # {"model": {"prompt": p, "completion": c}}; rows in the admin's price table win.
    # The sandbox's scripted model is priced like a mid-range hosted model.
    "MODEL_PRICES": json.loads(os.environ.get("AGENTOPS_MODEL_PRICES") or "null")
    or {"scripted": {"prompt": 2.5, "completion": 10.0}},
    # Shared limits per tool or provider (docs/limits.md), as JSON {"llm": {"requests": 60,
    # "per": 60, "concurrency": 8, "tokens": 200000}}; rows in the admin's Limits win.
    # None by default: a tool naming a limit that is not configured is not limited.
    "LIMITS": json.loads(os.environ.get("AGENTOPS_LIMITS") or "null") or {},
    # the most a run's owner may set its budget to, in dollars, unless their own quota says
    "OWNER_RUN_BUDGET_LIMIT": env_float("AGENTOPS_OWNER_RUN_BUDGET_LIMIT", 10.0),
}

# --- webhooks (docs/webhooks.md) ----------------------------------------------------------
# Deliveries to a private, loopback or link-local address are refused unless the address is
# in one of these networks (SSRF: a subscriber must not reach the deployment's own network).
# Local mode allows loopback, where the sandbox and a developer's receiver live.
WEBHOOKS = {
    "ALLOWED_NETWORKS": env_list("AGENTOPS_WEBHOOK_ALLOWED_NETWORKS",
                                 "127.0.0.0/8,::1/128" if LOCAL else ""),
    # the retry policy of a delivery (a durable retry: waits over a second free the worker)
    "RETRY_INITIAL": env_float("AGENTOPS_WEBHOOK_RETRY_INITIAL", 5.0),
    "RETRY_MAX_INTERVAL": env_float("AGENTOPS_WEBHOOK_RETRY_MAX_INTERVAL", 3600.0),
    "RETRY_FOR": env_float("AGENTOPS_WEBHOOK_RETRY_FOR", 3 * 86400.0),
    "TIMEOUT": env_float("AGENTOPS_WEBHOOK_TIMEOUT", 10.0),
}

# --- auth, i18n, static -----------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [  # OWASP ASVS 2.1.1 and 2.1.7: 12 characters, not a common one
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
     "OPTIONS": {"min_length": 12}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
]
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # refuses a locked-out login before the password
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "runs:list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# --- security headers, cookies, login throttling (docs/security.md) ----------------------
SECURE = not LOCAL
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", SECURE)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", SECURE)
CSRF_COOKIE_HTTPONLY = True  # htmx sends the token from the page (hx-headers), not the cookie
SESSION_COOKIE_AGE = env_int("SESSION_COOKIE_AGE", 12 * 3600)  # ASVS 3.3.2: 12 hours
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", SECURE)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 365 * 24 * 3600 if SECURE else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", SECURE)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
# Behind a TLS-terminating proxy: the header it sets and the value meaning HTTPS, e.g.
# SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO,https. Only if the proxy always sets it.
SECURE_PROXY_SSL_HEADER = tuple(env_list("SECURE_PROXY_SSL_HEADER")) or None
if SECURE_PROXY_SSL_HEADER is not None and len(SECURE_PROXY_SSL_HEADER) != 2:
    raise ImproperlyConfigured("SECURE_PROXY_SSL_HEADER is 'HEADER,value', "
                               "e.g. HTTP_X_FORWARDED_PROTO,https")
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SILENCED_SYSTEM_CHECKS = [
    # W021, SECURE_HSTS_PRELOAD: preloading puts the whole domain on the browsers' HTTPS-only
    # list, a commitment only the domain's owner can make (SECURE_HSTS_PRELOAD=1 makes it).
    *(["security.W021"] if not SECURE_HSTS_PRELOAD else []),
]

# No inline script or style, no eval (htmx: allowEval false, no indicator styles).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],   # data: for the favicon
        "connect-src": ["'self'"],        # the live sockets (ws/wss on this origin)
        "font-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    },
}

# django-axes: AXES_FAILURE_LIMIT wrong passwords for one username from one address lock
# that pair out for AXES_COOLOFF_TIME; the login page says so (runs/web/views/login.py). Keyed
# on the pair so that nobody can lock a user out from everywhere.
AXES_FAILURE_LIMIT = env_int("AGENTOPS_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_float("AGENTOPS_LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "runs.web.views.login.locked_out"
AXES_USERNAME_CALLABLE = "runs.web.views.login.axes_username"
AXES_VERBOSE = False

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(os.environ.get("STATIC_ROOT", BASE_DIR / "staticfiles"))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

# JSON lines with each line's run, branch, step, effect key and worker
# (runs/observability/logs.py); AGENTOPS_LOG_FORMAT=text for people (bin/serve).
LOG_FORMAT = os.environ.get("AGENTOPS_LOG_FORMAT", "json")
if LOG_FORMAT not in ("json", "text"):
    raise ImproperlyConfigured(f"AGENTOPS_LOG_FORMAT must be json or text, not {LOG_FORMAT!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "json": {"()": "runs.observability.logs.JsonFormatter"},
        "text": {"()": "runs.observability.logs.TextFormatter"},
    },
    "filters": {"context": {"()": "runs.observability.logs.ContextFilter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT,
                             "filters": ["context"]}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "WARNING")},
    "loggers": {
        "agentops": {"level": os.environ.get("AGENTOPS_LOG_LEVEL", "INFO")},
        "django_q": {"level": os.environ.get("DJANGO_Q_LOG_LEVEL", "WARNING")},
    },
}
