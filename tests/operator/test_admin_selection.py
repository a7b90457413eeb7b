"""A bulk action on a changelist whose selected id is not an id of the model is a 400
that changes nothing, never a 500, on every changelist of the admin: ours and those
django-axes, django-q2 and django.contrib.auth register (runs/admin_site.py)."""

import uuid

import pytest
from django.apps import apps
from django.contrib import admin
from django.db import models
from django.urls import reverse

from runs.budgets.models import ModelPrice

pytestmark = pytest.mark.django_db

HEX = uuid.uuid4().hex  # what the outside check sent: an id of a string-keyed model
REGISTERED = [model for model in apps.get_models() if admin.site.is_registered(model)]


@pytest.fixture
def root(client, django_user_model):
    admin_user = django_user_model.objects.create_superuser("root", "root@example.com",
                                                            "root-pass-1")
    client.force_login(admin_user)
    return client


def changelist(model) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


def bulk_delete(client, model, *selected):
    return client.post(changelist(model), {"action": "delete_selected", "post": "yes",
                                           "_selected_action": list(selected)})


def test_every_model_of_the_admin_is_covered():
    labels = {model._meta.label for model in REGISTERED}
    assert {"budgets.ModelPrice", "budgets.ApprovalPolicy", "budgets.Budget", "limits.Limit",
            "webhooks.Subscription", "webhooks.Delivery", "schedules.Schedule",
            "axes.AccessAttempt", "axes.AccessLog", "axes.AccessFailureLog"} <= labels


@pytest.mark.parametrize("model", REGISTERED, ids=lambda model: model._meta.label)
def test_a_bulk_delete_of_an_id_the_key_cannot_hold_is_a_400(root, model):
    count = model._default_manager.count()
    # over any key's length and not a number: no primary key here can hold it
    response = bulk_delete(root, model, HEX + "-" + "x" * 300)
    assert response.status_code == 400, response.content[:300]
    assert b"is not an id of" in response.content
    if isinstance(model._meta.pk, models.IntegerField):  # AutoField and BigAutoField too
        assert bulk_delete(root, model, HEX).status_code == 400
    else:  # a 32-character id is a possible key: none is selected, nothing deleted
        assert bulk_delete(root, model, HEX).status_code in (200, 302)
    assert model._default_manager.count() == count


def test_a_bad_id_among_good_ones_deletes_nothing(root):
    price = ModelPrice.objects.create(model="m", prompt_per_million=1, completion_per_million=2)
    assert bulk_delete(root, ModelPrice, str(price.pk), HEX).status_code == 400
    assert ModelPrice.objects.filter(pk=price.pk).exists()
    assert bulk_delete(root, ModelPrice, str(2**70)).status_code == 400  # out of range
    assert bulk_delete(root, ModelPrice, str(price.pk)).status_code == 302  # a good id
    assert not ModelPrice.objects.filter(pk=price.pk).exists()
