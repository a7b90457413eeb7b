import pytest

from sandbox import dataset


def test_rows_are_deterministic_and_addressable_in_any_order():
    assert dataset.source_rows(0, 100) == dataset.source_rows(0, 100)
    assert dataset.source_rows(0, 100)[50:] == dataset.source_rows(50, 50)
    assert dataset.source_rows(0, 5, seed=1) != dataset.source_rows(0, 5, seed=0)


def test_a_row_has_the_documented_fields():
    row = dataset.source_rows(41, 1)[0]
    assert row["id"] == 42
    assert set(row) == {"id", "name", "email", "amount_cents", "country", "created"}
    assert isinstance(row["amount_cents"], int) and row["amount_cents"] >= 0
    assert row["created"].endswith("Z")


def test_rows_stop_at_the_total():
    assert len(dataset.source_rows(99_990, 100)) == 10
    assert dataset.source_rows(100_000, 10) == []
    assert len(dataset.source_rows(0, 10, total=3)) == 3
    with pytest.raises(dataset.DatasetError):
        dataset.source_rows(-1, 10)


def test_checksum_ignores_order_and_sees_duplicates_and_changes():
    rows = dataset.source_rows(0, 1000)
    assert dataset.checksum(rows) == dataset.checksum(reversed(rows))
    assert dataset.checksum(rows) != dataset.checksum(rows + rows[:1])
    assert dataset.checksum(rows) != dataset.checksum(rows[1:])
    assert len(dataset.checksum([])) == 16


def test_checksum_of_pages_adds_up_to_the_whole():
    whole = dataset.checksum(dataset.source_rows(0, 300))
    parts = [int(dataset.checksum(dataset.source_rows(o, 100)), 16) for o in (0, 100, 200)]
    assert f"{sum(parts) % 2**64:016x}" == whole


def test_transform():
    row = {
        "id": 7,
        "name": "Ada",
        "email": "Ada.L@Example.COM",
        "amount_cents": 1205,
        "country": "GB",
    }
    assert dataset.transform(row) == {
        "id": 7,
        "name": "Ada",
        "email": "ada.l@example.com",
        "amount": "12.05",
        "country": "GB",
        "unit": "row-7",
    }
    assert dataset.transform({**row, "amount_cents": 0})["amount"] == "0.00"


def test_the_rows_endpoint(client):
    answer = client.get("/sandbox/dataset/rows", {"offset": 10, "limit": 5}).json()
    assert answer["rows"] == dataset.source_rows(10, 5)
    assert answer["next_offset"] == 15
    assert answer["checksum"] == dataset.checksum(answer["rows"])
    last = client.get("/sandbox/dataset/rows", {"offset": 95, "limit": 10, "total": 100}).json()
    assert len(last["rows"]) == 5 and last["next_offset"] is None


@pytest.mark.parametrize("params", [{"limit": 5001}, {"limit": -1}, {"offset": "x"}, {"total": -5}])
def test_the_rows_endpoint_rejects_bad_parameters(client, params):
    response = client.get("/sandbox/dataset/rows", params)
    assert response.status_code == 400
    assert response.json()["param"] == next(iter(params))
