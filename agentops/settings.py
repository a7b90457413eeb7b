"""Settings, read from the environment with safe local defaults.

No variable set means local mode: SQLite (WAL) in ./var, an in-process channel layer
plus database polling for live pages, the sandbox mounted.
Production sets DATABASE_URL (PostgreSQL), REDIS_URL (channels-redis), ALLOWED_HOSTS
and a SECRET_KEY, which turns on the deployment defaults (docs/security.md).
"""

import os
import sys
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

# settings of their own modules, read through django.conf.settings like the rest
from agentops.engine_settings import AGENTOPS, AGENTOPS_WORKERS, WEBHOOKS  # noqa: F401
from agentops.environment import (
    DATABASE_URL,
    DB_POOL_RECONNECT_SECONDS,
    DB_TRANSACTION_POOLING,
    IS_POSTGRES,
    LOCAL,
    env_bool,
    env_float,
    env_int,
    env_list,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("AGENTOPS_VAR_DIR", BASE_DIR / "var"))
# The site's templates and static files: at the checkout's root, or inside the agentops
# package when installed from a wheel (setup.py puts them there).
SITE_FILES = BASE_DIR if (BASE_DIR / "templates").is_dir() else Path(__file__).resolve().parent


# --- local mode or a deployment (docs/security.md) ---------------------------------------
# Local mode (bin/serve, bin/test, a laptop) is neither SECRET_KEY nor ALLOWED_HOSTS set:
# only loopback host names are served, cookies travel over plain HTTP and the sandbox is
# mounted. Either variable set means a deployment: a real SECRET_KEY is required, cookies
# are Secure, HTTPS is enforced (redirect + HSTS) and the sandbox is off unless
# AGENTOPS_SANDBOX=1. A deployment has to set ALLOWED_HOSTS to be reachable by its name.
# (LOCAL: agentops/environment.py)
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
    "runs",
    "runs.api",  # the HTTP API, its tokens and idempotency keys (docs/api.md)
    "runs.budgets",  # budgets, the ledger, approvals (docs/budgets.md, docs/approvals.md)
    "runs.chat",  # chat agents: messages to a run, the conversation view (runs/chat/)
    "runs.limits",  # shared limits per tool or provider (docs/limits.md)
    "sandbox",
    "builtin_agents",
    "runs.webhooks",  # subscriptions and their deliveries (docs/webhooks.md)
    "runs.schedules",  # agents launched on a cron expression or an interval (docs/schedules.md)
    "runs.observability",
    "runs.admin_site.AgentopsAdminConfig",  # django.contrib.admin, its site checking selections
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "csp",
    "axes",
    # Not "ninja": its Swagger UI comes from static/vendor (runs/api/docs.py says why).
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "runs.api.middleware.ApiErrorsAreJsonMiddleware",  # /api/v1/: JSON errors, always
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
        "DIRS": [SITE_FILES / "templates"],
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
# `manage.py worker` forks its workers, and forked children must not share a connection
# pool (seen: lost results and hung shutdowns), so the pool is only switched on for web
# processes (AGENTOPS_DB_POOL=1 in the Procfile's web line). Each worker process makes a
# pool of its own after the fork (runs/worker/db.py). DATABASE_URL, IS_POSTGRES, the pool's
# reconnect and transaction pooling: agentops/environment.py.
if DATABASE_URL:
    # Health checks: a connection is checked before it is handed out (from the pool, or
    # reused by a request), so one that a database restart or pg_terminate_backend ended
    # is replaced instead of failing the request (docs/database-faults.md).
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0,
                                                  conn_health_checks=True)}
    if IS_POSTGRES:
        # A database that does not answer fails a connection attempt after this
        # long, and a dead peer is noticed by TCP keepalives, not never.
        DATABASES["default"]["OPTIONS"] = {
            "connect_timeout": env_int("AGENTOPS_DB_CONNECT_TIMEOUT", 5),
            "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
            "keepalives_count": 3,
        }
        if env_bool("AGENTOPS_DB_POOL") and sys.argv[1:2] != ["worker"]:
            # The engine checks each connection as it leaves the pool, and all the idle
            # ones at the first dead one; the pool's own check (CONN_HEALTH_CHECKS) would
            # sleep 1 s, 2 s, 4 s... after each dead one (agentops/pooled_postgresql).
            DATABASES["default"]["ENGINE"] = "agentops.pooled_postgresql"
            DATABASES["default"]["CONN_HEALTH_CHECKS"] = False
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
if DB_TRANSACTION_POOLING:
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True

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
STATICFILES_DIRS = [SITE_FILES / "static"]
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
    "filters": {"context": {"()": "runs.observability.logs.ContextFilter"},
                # the simulated outside world's answers stay out of the console (a 503 on
                # purpose is no error); an exception in it still logs (sandbox/logs.py)
                "sandbox_answers": {"()": "sandbox.logs.SandboxAnswers"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT,
                             "filters": ["context"]}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "WARNING")},
    "loggers": {
        "agentops": {"level": os.environ.get("AGENTOPS_LOG_LEVEL", "INFO")},
        "django.request": {"filters": ["sandbox_answers"]},
    },
}
