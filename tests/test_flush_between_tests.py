"""The flush between transactional tests (tests/conftest.py, KEPT_THROUGH_FLUSH): a
test's rows are gone after it; the content types and permissions that migrate made
stay, without post_migrate making them again; the Operators group is back with its
permission, as after a migrate. The two tests run in this order (one file, one process)."""

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.contrib.contenttypes.models import ContentType

from runs.models import Run
from runs.operator.groups import OPERATORS, PERMISSION

pytestmark = pytest.mark.django_db(transaction=True)
SEEN: dict = {}


def test_a_transactional_test_leaves_rows_behind_it():
    User.objects.create_user("left-behind")
    Group.objects.get(name=OPERATORS).delete()
    SEEN["content_types"] = ContentType.objects.count()
    SEEN["permissions"] = sorted(Permission.objects.values_list("pk", flat=True))


def test_the_next_test_finds_them_gone_and_the_migrated_rows_as_they_were():
    assert SEEN, "runs after the test above"
    assert not User.objects.filter(username="left-behind").exists()
    assert ContentType.objects.count() == SEEN["content_types"]
    assert sorted(Permission.objects.values_list("pk", flat=True)) == SEEN["permissions"]
    group = Group.objects.get(name=OPERATORS)
    assert list(group.permissions.values_list("content_type__app_label", "codename")) == [
        PERMISSION]
    assert ContentType.objects.get_for_model(Run).model == "run"
