import pytest

from sandbox.models import Notification

URL = "/sandbox/api/notifications"


@pytest.mark.django_db
def test_every_call_is_a_new_notification(client):
    body = {"unit": "run-1:step-3", "to": "ops@example.com"}
    answers = [
        client.post(URL, body, content_type="application/json", HTTP_IDEMPOTENCY_KEY="k")
        for _ in range(3)
    ]
    assert [a.status_code for a in answers] == [201, 201, 201]
    assert [a.json()["count"] for a in answers] == [1, 2, 3]
    assert len({a.json()["id"] for a in answers}) == 3
    assert Notification.objects.filter(unit="run-1:step-3", idempotency_key="k").count() == 3


@pytest.mark.django_db
def test_it_lists_notifications_with_counts_per_unit(client):
    for unit in ("a", "a", "b"):
        client.post(URL, {"unit": unit}, content_type="application/json")
    client.post(URL, {"no": "unit"}, content_type="application/json")
    listing = client.get(URL).json()
    assert listing["count"] == 4
    assert listing["per_unit"] == {"a": 2, "b": 1, "": 1}
    assert listing["units_notified_more_than_once"] == ["a"]
    assert [n["body"] for n in listing["notifications"]][:2] == [{"unit": "a"}, {"unit": "a"}]


@pytest.mark.django_db
def test_it_requires_a_json_object(client):
    response = client.post(URL, "[1]", content_type="application/json")
    assert response.status_code == 400
    assert not Notification.objects.exists()
