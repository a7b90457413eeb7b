"""The "Operators" group and its permission, made idempotently.

Migration 0002 makes them on a fresh database. A test database flushed between
transactional tests loses them (flush empties every table; post_migrate then makes
permissions again, but not groups): `ensure_operators_group` puts them back, and is
meant to be connected to post_migrate (see runs/apps.py).
"""

OPERATORS = "Operators"
PERMISSION = ("runs", "operate_run")


def ensure_operators_group(**kwargs):
    from django.contrib.auth.models import Group, Permission
    from django.contrib.contenttypes.models import ContentType

    from runs.models import Run

    # After a flush the cached content type ids point at deleted rows.
    ContentType.objects.clear_cache()
    content_type = ContentType.objects.get_for_model(Run)
    permission, _ = Permission.objects.get_or_create(
        content_type=content_type, codename=PERMISSION[1],
        defaults={"name": "Can operate every run (pause, resume, cancel, roll back)"})
    group, _ = Group.objects.get_or_create(name=OPERATORS)
    group.permissions.add(permission)
    return group
