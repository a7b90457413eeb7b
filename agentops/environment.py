"""Reading settings from the environment: the typed readers, and the facts about the
deployment that several settings depend on (local mode, the database, a pooler in
transaction mode). agentops/settings.py and agentops/engine_settings.py both read them
from here, so each is decided once."""

import os

import dj_database_url
from django.core.exceptions import ImproperlyConfigured


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


def env_retention_days(name: str, default: float) -> float:
    """Days, or 0 for "off" (nothing is deleted)."""
    value = os.environ.get(name, "").strip().lower()
    if value in ("off", "never", "none"):
        return 0.0
    try:
        days = float(value) if value else default
    except ValueError:
        raise ImproperlyConfigured(f'{name} must be a number of days or "off", '
                                   f"not {value!r}") from None
    if not 0 <= days < 36500:  # NaN and inf too: a timedelta of them does not exist
        raise ImproperlyConfigured(f'{name} must be 0 to 36500 days (or "off"), not {value!r}')
    return days


# Local mode (bin/serve, bin/test, a laptop) is neither SECRET_KEY nor ALLOWED_HOSTS set
# (docs/security.md; agentops/settings.py says what each mode turns on).
LOCAL = not os.environ.get("SECRET_KEY") and not os.environ.get("ALLOWED_HOSTS")
DATABASE_URL = os.environ.get("DATABASE_URL", "")
IS_POSTGRES = bool(DATABASE_URL) and (
    dj_database_url.parse(DATABASE_URL)["ENGINE"] == "django.db.backends.postgresql")
# A pool that cannot connect retries with a doubling delay (1, 2, 4, 8 s...), which
# after an outage kept requests and runs waiting for its next try long after the
# database was back. Giving up a try after this long bounds that wait: the next
# request for a connection starts a new one at once.
DB_POOL_RECONNECT_SECONDS = env_float("AGENTOPS_DB_RECONNECT_SECONDS", 5.0)
# Behind a pooler in transaction mode (PgBouncer's pool_mode=transaction, the usual way to
# put many worker hosts on one PostgreSQL) each transaction may get another server
# connection, so nothing of a session outlives its transaction: no prepared statement
# (PgStore's, runs/storage/pg.py) and no server-side cursor (Django's iterator()).
DB_TRANSACTION_POOLING = env_bool("AGENTOPS_DB_TRANSACTION_POOLING", False)
