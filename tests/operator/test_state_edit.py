"""The state editor on a 2 MB state: an edit posts one path (or a JSON Patch), is
previewed as a diff, and confirmed onto a new branch with exactly that change; a bad
path, bad JSON, a stale preview or a post too large for the server is an error on the
styled form, and changes nothing."""

import copy
import json

import pytest

from runs import services
from runs.durable.errors import StaleEditError
from runs.models import AuditEntry, Checkpoint, Run
from tests.support.big_state import latest_state, paused_run_with_big_state, state_bytes

pytestmark = pytest.mark.django_db


@pytest.fixture
def big_run(users):
    run = paused_run_with_big_state(users["alice"])
    assert state_bytes(latest_state(run)[1]) > 1_900_000  # the crawl past 40%
    return run


def url(run):
    return f"/ops/runs/{run.pk}/state/"


def unchanged(run_id):
    run = Run.objects.get(pk=run_id)
    return (run.status, run.branch, run.epoch, Checkpoint.objects.filter(run_id=run_id).count(),
            AuditEntry.objects.filter(run_id=run_id).count())


def edit(ops, run, base, button="preview", **fields):
    """Preview the edit; with button="confirm", confirm what the preview showed."""
    data = {"checkpoint": base.number, "op": "replace", "reason": "fix a title", **fields}
    preview = ops.post(url(run), {**data, "preview": "1"})
    if button == "preview" or preview.status_code != 200:
        return preview
    return ops.post(url(run), {**data, "confirm": "1",
                               "previewed": preview.context["preview_token"]})


def test_the_editor_shows_the_state_by_path_not_the_whole_document(ops, big_run):
    page = ops.get(url(big_run))
    body = page.content.decode()
    assert page.status_code == 200 and len(page.content) < 100_000
    assert 'data-path="/pages"' in body and 'data-path="/frontier"' in body
    deeper = ops.get(url(big_run), {"path": "/pages/3"}).content.decode()
    assert 'data-path="/pages/3/title"' in deeper and "Page 3" in deeper
    missing = ops.get(url(big_run), {"path": "/pages/99999"}).content.decode()
    assert "There is no value at" in missing


def test_a_path_edit_on_a_2mb_state_applies_exactly_that_change_on_a_new_branch(ops, big_run):
    checkpoint, before = latest_state(big_run)
    fields = {"path": "/pages/3/title", "value": '"Page three"'}
    preview = edit(ops, big_run, checkpoint, **fields)
    body = preview.content.decode()
    assert preview.status_code == 200 and 'id="edit-preview"' in body and 'id="edit-confirm"' in body
    assert "-  &quot;title&quot;: &quot;Page 3&quot;," in body
    assert "+  &quot;title&quot;: &quot;Page three&quot;," in body
    assert unchanged(big_run.pk) == unchanged(big_run.pk) and latest_state(big_run)[0] == checkpoint

    done = edit(ops, big_run, checkpoint, button="confirm", **fields)
    assert done.status_code == 302
    run = Run.objects.get(pk=big_run.pk)
    assert (run.status, run.branch) == ("paused", big_run.branch + 1)
    new_checkpoint, after = latest_state(run)
    expected = copy.deepcopy(before)
    expected["pages"][3]["title"] = "Page three"
    assert after == expected and new_checkpoint.parent_number == checkpoint.number
    audit = AuditEntry.objects.get(run=run, action="edit_state", reason="fix a title")
    patch = [{"op": "replace", "path": "/pages/3/title", "value": "Page three"}]
    assert (audit.after["paths"], audit.after["patch"]) == (["/pages/3/title"], patch)
    assert len(json.dumps([audit.before, audit.after])) < 2000  # the patch, not the state


def test_a_json_patch_adds_removes_and_moves_in_one_edit(ops, big_run):
    checkpoint, before = latest_state(big_run)
    patch = [{"op": "add", "path": "/frontier/-", "value": "https://site.test/new"},
             {"op": "remove", "path": "/pages/0"}, {"op": "add", "path": "/note", "value": {}},
             {"op": "move", "from": "/frontier/0", "path": "/seen"}]
    preview = edit(ops, big_run, checkpoint, json_patch=json.dumps(patch)).content.decode()
    assert "move (from)" in preview and "-  &quot;https://site.test/p/7300&quot;," in preview
    response = edit(ops, big_run, checkpoint, button="confirm", json_patch=json.dumps(patch))
    assert response.status_code == 302
    expected = copy.deepcopy(before)
    expected["frontier"].append("https://site.test/new")
    del expected["pages"][0]
    expected["note"] = {}
    expected["seen"] = expected["frontier"].pop(0)
    assert latest_state(Run.objects.get(pk=big_run.pk))[1] == expected


BAD_EDITS = [
    ({"path": "/nope/title", "value": "1"}, "does not apply to the state"),
    ({"path": "/pages/99999/title", "value": "1"}, "does not apply to the state"),
    ({"op": "add", "path": "/missing/child", "value": "1"}, "does not apply to the state"),
    ({"op": "remove", "path": "/pages/99999"}, "does not apply to the state"),
    ({"path": "pages/3", "value": "1"}, "A path starts with"),
    ({"path": "/pages/3/title", "value": "{nope"}, "Not valid JSON"),
    ({"path": "/pages/3/title", "value": ""}, "Give the new value"),
    ({"path": "", "value": "[1, 2]"}, "must stay a JSON object"),
    ({"op": "bogus", "path": "/n", "value": "1"}, "Select a valid choice"),
    ({"json_patch": '{"op": "remove", "path": "/n"}'}, "non-empty list of operations"),
    ({"json_patch": '[{"op": "test", "path": "/n", "value": "wrong"}]'}, "does not apply"),
    ({"json_patch": '[{"op": "replace", "path": "/n"}]'}, "not a valid JSON Patch"),
    ({"checkpoint": "", "path": "/n", "value": "1"}, "checkpoint: This field is required"),
]


@pytest.mark.parametrize("button", ["preview", "confirm"])
def test_bad_paths_and_bad_json_are_form_errors_and_change_nothing(ops, big_run, button):
    checkpoint, before = latest_state(big_run)
    was = unchanged(big_run.pk)
    for fields, error in BAD_EDITS:
        data = {"checkpoint": checkpoint.number, "op": "replace", "reason": "r", **fields}
        response = ops.post(url(big_run), {**data, button: "1", "previewed": "any"})
        body = response.content.decode()
        assert response.status_code == 400, fields
        assert error in body and 'id="edit-state-form"' in body, (fields, error)
        assert len(response.content) < 100_000, fields  # no error quotes the 2 MB state
    assert unchanged(big_run.pk) == was and latest_state(big_run)[1] == before


def test_an_edit_prepared_on_an_older_checkpoint_is_refused(ops, big_run):
    checkpoint, _ = latest_state(big_run)
    data = {"checkpoint": checkpoint.number, "op": "replace", "path": "/pages/4/title",
            "value": '"second"', "reason": "r"}
    token = ops.post(url(big_run), {**data, "preview": "1"}).context["preview_token"]
    # meanwhile another operator edits the state
    assert edit(ops, big_run, checkpoint, button="confirm", path="/pages/3/title",
                value='"first"').status_code == 302
    was = unchanged(big_run.pk)
    stale = ops.post(url(big_run), {**data, "confirm": "1", "previewed": token})
    assert stale.status_code == 409 and "the state changed since it was shown" in \
        stale.content.decode()
    assert stale.context["form"]["checkpoint"].value() == checkpoint.number + 1  # shown anew
    assert unchanged(big_run.pk) == was
    # and the engine refuses it too, should the view's check be overtaken by a commit
    with pytest.raises(StaleEditError):
        services.run_patch_state(run_id=big_run.pk, checkpoint=checkpoint.number, user="op",
                                 patch=[{"op": "remove", "path": "/frontier"}])
    assert unchanged(big_run.pk) == was


def test_confirm_applies_only_the_edit_that_was_previewed(ops, big_run):
    checkpoint, before = latest_state(big_run)
    data = {"checkpoint": checkpoint.number, "op": "replace", "path": "/pages/5/title",
            "value": '"shown"', "reason": "r"}
    token = ops.post(url(big_run), {**data, "preview": "1"}).context["preview_token"]
    was = unchanged(big_run.pk)
    changed = ops.post(url(big_run), {**data, "value": '"not shown"', "confirm": "1",
                                      "previewed": token})
    body = changed.content.decode()
    assert changed.status_code == 200 and "The edit changed after its preview" in body
    assert "+  &quot;title&quot;: &quot;not shown&quot;," in body  # its diff, to confirm
    unpreviewed = ops.post(url(big_run), {**data, "confirm": "1"})
    assert unpreviewed.status_code == 200 and 'id="edit-preview"' in unpreviewed.content.decode()
    assert unchanged(big_run.pk) == was and latest_state(big_run)[1] == before


def test_a_post_too_large_for_the_server_is_an_error_on_the_styled_form(ops, big_run, settings):
    checkpoint, before = latest_state(big_run)
    was = unchanged(big_run.pk)
    huge = json.dumps(["x" * 100] * 30_000)  # 3 MB: over DATA_UPLOAD_MAX_MEMORY_SIZE
    assert len(huge) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    response = edit(ops, big_run, checkpoint, path="/pages", value=huge)
    body = response.content.decode()
    assert response.status_code == 413
    assert "The edit was too large to send" in body and "Nothing was changed" in body
    assert 'id="edit-state-form"' in body and "/static/css/app" in body  # the page, styled
    assert "Bad Request" not in body
    assert unchanged(big_run.pk) == was and latest_state(big_run)[1] == before


def test_a_value_over_the_fields_limit_is_a_form_error(ops, big_run):
    checkpoint, _ = latest_state(big_run)
    was = unchanged(big_run.pk)
    value = json.dumps(["x" * 100] * 15_000)  # 1.5 MB: the server reads it, the field refuses
    response = edit(ops, big_run, checkpoint, path="/pages", value=value)
    body = response.content.decode()
    assert response.status_code == 400 and "Too large: " in body and "at most 1048576 bytes" in body
    assert unchanged(big_run.pk) == was


def test_any_other_page_says_a_post_was_too_large_on_a_styled_page(ops, big_run):
    response = ops.post(f"/ops/runs/{big_run.pk}/act/",
                        {"action": "pause", "reason": "x" * 3_000_000})
    body = response.content.decode()
    assert response.status_code == 413 and "Too large to send" in body
    assert "/static/css/app" in body
