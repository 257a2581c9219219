"""The review page's JSON API and its security, over HTTP: the token, the anti-forgery header,
--read-only, ids from the address, the CLI's --json shapes, actions and their errors."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

import turnback
from turnback.ui.app import build_app

from .conftest import TURNBACK, Reviewed, StartServer, cli_json, say

TOKEN = "the-token-of-this-test"


@pytest.fixture
def tb(reviewed: Reviewed) -> Iterator[turnback.Turnback]:
    with turnback.open(reviewed.home, create=False) as handle:
        yield handle


def client_for(tb: turnback.Turnback, *, read_only: bool = False) -> TestClient:
    app = build_app(tb, TOKEN, read_only=read_only, hosts=["testserver"])
    client = TestClient(app, follow_redirects=False)
    client.headers["authorization"] = f"Bearer {login(client, TOKEN).json()['key']}"
    return client


def login(client: TestClient, token: str) -> httpx.Response:
    """What the page's script does with the address's ``#token=``."""
    return client.post("/api/login", json={"token": token})


@pytest.fixture
def client(tb: turnback.Turnback) -> TestClient:
    return client_for(tb)


def post(client: TestClient, path: str, body: object) -> httpx.Response:
    return client.post(path, json=body)


def files(workspace: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(workspace.iterdir()) if p.is_file()}


# -- the token and the key ----------------------------------------------------------------------


def test_without_a_key_every_api_is_refused_and_the_shell_holds_no_secret(
    tb: turnback.Turnback,
) -> None:
    app = build_app(tb, TOKEN, hosts=["testserver"])
    with TestClient(app, follow_redirects=False) as anonymous:
        page = anonymous.get("/")
        asset = anonymous.get("/assets/app.js")
        api = anonymous.get("/api/sessions")
        wrong = anonymous.get("/api/sessions", headers={"authorization": "Bearer guess"})
        wrong_token = login(anonymous, "guess")
        not_json = anonymous.post("/api/login", content=b"token=guess")

    assert page.status_code == 200 and asset.status_code == 200  # no data, no secret in them
    assert TOKEN not in page.text and "review me" not in page.text
    assert api.status_code == 401 and "#token=" in api.json()["error"]["hint"]
    assert wrong.status_code == 403 and wrong_token.status_code == 403
    assert "wrong token" in wrong_token.json()["error"]["message"]
    assert not_json.status_code == 400


def test_the_token_is_swapped_for_a_key_and_no_cookie_is_ever_set(tb: turnback.Turnback) -> None:
    app = build_app(tb, TOKEN, hosts=["testserver"])
    with TestClient(app, follow_redirects=False) as browser:
        first = login(browser, TOKEN)
        again = login(browser, TOKEN)  # the printed token logs in again: another browser
        key, other = first.json()["key"], again.json()["key"]
        listed = browser.get("/api/sessions", headers={"authorization": f"Bearer {key}"})
        also = browser.get("/api/sessions", headers={"authorization": f"Bearer {other}"})
        page = browser.get("/")

    assert first.status_code == 200 and key != other and TOKEN not in (key, other)
    assert first.headers["cache-control"] == "no-store"
    assert listed.status_code == 200 and also.status_code == 200
    for answer in (first, again, listed, page):
        assert "set-cookie" not in answer.headers  # cookies reach every port of this host
    assert listed.headers["x-frame-options"] == "DENY"
    assert "script-src 'self'" in listed.headers["content-security-policy"]


def test_a_one_time_token_logs_in_once_and_only_for_a_while(
    tb: turnback.Turnback, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = build_app(tb, TOKEN, once=["for-the-browser"], hosts=["testserver"])
    with TestClient(app) as browser:
        first = login(browser, "for-the-browser")
        second = login(browser, "for-the-browser")
    monkeypatch.setattr("turnback.ui.app.ONCE_FOR", -1.0)
    late = build_app(tb, TOKEN, once=["for-the-browser"], hosts=["testserver"])
    with TestClient(late) as browser:
        expired = login(browser, "for-the-browser")

    assert first.status_code == 200
    assert second.status_code == 403 and "used already" in second.json()["error"]["message"]
    assert expired.status_code == 403


@pytest.mark.parametrize(
    "headers",
    [
        {"sec-fetch-site": "same-site"},  # another port of this host
        {"sec-fetch-site": "cross-site"},
        {"origin": "http://127.0.0.1:9"},
        {"origin": "null"},
    ],
)
def test_an_action_from_another_site_or_port_is_refused_even_with_the_key(
    client: TestClient, reviewed: Reviewed, tb: turnback.Turnback, headers: dict[str, str]
) -> None:
    sid = reviewed.session
    refused = client.post(f"/api/sessions/{sid}/revert", json={"to_turn": 0}, headers=headers)
    read = client.get(f"/api/sessions/{sid}/log", headers=headers)

    assert refused.status_code == 403, refused.text
    assert "another site or another port" in refused.json()["error"]["message"]
    assert tb.session(sid).reverts() == []
    assert read.status_code == (200 if "origin" in headers else 403)
    mine = client.get("/api/sessions", headers={"sec-fetch-site": "same-origin"})
    assert mine.status_code == 200


def test_a_foreign_host_name_is_refused(client: TestClient) -> None:
    assert client.get("/api/sessions", headers={"host": "evil.example:80"}).status_code == 400
    assert client.get("/", headers={"host": "192.0.2.7:80"}).status_code == 400


def test_served_on_every_address_an_address_is_a_host_and_a_name_is_not(
    tb: turnback.Turnback,
) -> None:
    app = build_app(tb, TOKEN, hosts=["0.0.0.0", "builder"], any_address=True)
    with TestClient(app) as browser:
        for host in ("192.0.2.7:8080", "[2001:db8::7]:8080", "builder:8080", "127.0.0.1"):
            assert browser.get("/", headers={"host": host}).status_code == 200, host
        assert browser.get("/", headers={"host": "rebound.example:8080"}).status_code == 400


# -- the API serves the CLI's --json shapes ---------------------------------------------------


def test_reads_answer_exactly_what_the_cli_prints(client: TestClient, reviewed: Reviewed) -> None:
    sid = reviewed.session
    assert client.get("/api/sessions").json() == cli_json(reviewed.home, "sessions")
    assert client.get(f"/api/sessions/{sid}/log").json() == cli_json(reviewed.home, "log", sid)
    assert client.get(f"/api/sessions/{sid[:8]}/turns/2").json() == cli_json(
        reviewed.home, "show", sid, "2"
    )
    diff = client.get(f"/api/sessions/{sid}/turns/2/diff").json()
    assert diff == cli_json(reviewed.home, "diff", sid, "2")
    assert {f["path"] for f in diff["files"]} == {"app.py", "helper.py"}
    assert [f["path"] for f in diff["outside"]] == ["by-hand.txt"]
    assert '+    return "two"' in diff["patch"]


def test_a_big_turn_page_asks_for_the_files_first_and_their_patches_as_they_show(
    client: TestClient, reviewed: Reviewed
) -> None:
    sid = reviewed.session
    stat = client.get(f"/api/sessions/{sid}/turns/2/diff", params={"stat": 1}).json()
    one = client.get(f"/api/sessions/{sid}/turns/2/patch", params={"path": "helper.py"}).json()
    stray = client.get(f"/api/sessions/{sid}/turns/2/patch", params={"path": "../notes.txt"})
    none = client.get(f"/api/sessions/{sid}/turns/2/patch")
    many = client.get(f"/api/sessions/{sid}/turns/2/patch", params=[("path", "app.py")] * 201)

    assert stat["patch"] is None and {f["path"] for f in stat["files"]} == {"app.py", "helper.py"}
    assert one["paths"] == ["helper.py"]
    assert "+HELP = 1" in one["patch"] and "app.py" not in one["patch"]
    assert stray.status_code == 404 and "did not change '../notes.txt'" in stray.text
    assert none.status_code == 400 and many.status_code == 400


def test_a_running_turns_diff_is_captured_at_most_every_two_seconds(
    client: TestClient, tb: turnback.Turnback, reviewed: Reviewed
) -> None:
    """Each answer about a running turn's diff is a capture of the workspace: however many
    pages ask, and with or without ?stat, one capture serves every request for 2 s."""
    path = f"/api/sessions/{reviewed.session}/turns/4/diff"
    with tb.session(reviewed.session).turn("write the docs") as turn:
        (reviewed.workspace / "index.md").write_text("# Docs\n")
        first = client.get(f"{path}?stat=1").json()
        (reviewed.workspace / "guide.md").write_text("# Guide\n")
        again = client.get(path).json()
        time.sleep(2.1)
        later = client.get(path).json()
        say(turn, "done")

    assert [f["path"] for f in first["files"]] == ["index.md"] and first["patch"] is None
    assert [f["path"] for f in again["files"]] == ["index.md"]  # the same capture
    assert "+# Docs" in again["patch"]
    assert [f["path"] for f in later["files"]] == ["guide.md", "index.md"]
    ended = client.get(path).json()  # an ended turn's diff is its checkpoints', at once
    assert ended["turn"]["status"] == "completed" and len(ended["files"]) == 2


def test_a_range_diff_spans_turns_and_the_hand_edits_between(
    client: TestClient, reviewed: Reviewed
) -> None:
    sid = reviewed.session
    whole = client.get(f"/api/sessions/{sid}/range", params={"from": 0, "to": 3}).json()
    one_to_two = client.get(f"/api/sessions/{sid}/range", params={"from": 1, "to": 2}).json()

    # helper.py came and went
    assert {f["path"] for f in whole["files"]} == {"app.py", "by-hand.txt", "CHANGES.md"}
    assert {f["path"] for f in one_to_two["files"]} == {"app.py", "by-hand.txt", "helper.py"}
    assert "+typed by a person" in one_to_two["patch"]
    backwards = client.get(f"/api/sessions/{sid}/range", params={"from": 3, "to": 1})
    assert backwards.status_code == 404
    assert "earlier turn to a later one" in backwards.json()["error"]["message"]


def test_a_lone_surrogate_is_served_as_its_json_escape(
    client: TestClient, reviewed: Reviewed, tb: turnback.Turnback
) -> None:
    """An unpaired surrogate an agent sent (kept by the store) is answered as the JSON escape it
    came as, in the log, a turn and the live stream: never a 500."""
    sid = reviewed.session
    session = tb.session(sid)
    with session.turn("mend the \ud83d emoji") as turn:
        say(turn, "half a pair: \ud800")
    running = session.turn("still \udfff going")
    say(running, "live \udc00 text")
    tb.journal.flush()

    log = client.get(f"/api/sessions/{sid}/log")
    shown = client.get(f"/api/sessions/{sid}/turns/4")
    assert log.status_code == 200 and shown.status_code == 200
    assert b"\\ud83d" in log.content  # the escape, in UTF-8 that always encodes
    assert log.json()["turns"][3]["prompt"] == "mend the \ud83d emoji"
    assert shown.json()["messages"][1]["text"] == "half a pair: \ud800"
    with client.stream("GET", f"/api/sessions/{sid}/stream") as events:
        for line in events.iter_lines():
            if line.startswith("data: {"):
                data = json.loads(line[6:])
                assert data["turn"]["prompt"] == "still \udfff going"
                assert data["messages"][-1]["text"] == "live \udc00 text"
                break
    running.complete()


@pytest.mark.parametrize(
    ("path", "status", "words"),
    [
        ("/api/sessions/not-hex/log", 400, "not a session id"),
        ("/api/sessions/..%2F..%2Fetc/log", 404, None),
        ("/api/sessions/ffffffff/log", 404, "no session matches"),
        ("/api/sessions/{sid}/turns/987654/diff", 404, "has no turn 987654"),
        ("/api/sessions/{sid}/turns/x%2Fy/diff", 404, None),
        ("/api/sessions/{sid}/turns/zz", 400, "not a turn number"),
        ("/api/sessions/{sid}/range?from=a&to=1", 400, "turn number"),
        ("/assets/..%2F..%2Fapp.py", 404, None),
        ("/assets/app.py", 404, "no asset"),
    ],
)
def test_bad_ids_in_the_address_get_a_clear_error(
    client: TestClient, reviewed: Reviewed, path: str, status: int, words: str | None
) -> None:
    answer = client.get(path.replace("{sid}", reviewed.session))
    assert answer.status_code == status, answer.text
    if words:
        error = answer.json()["error"]
        assert words in error["message"] and error["hint"]


def test_a_pruned_checkpoint_is_a_conflict_that_says_why_not_a_server_error(
    client: TestClient, tb: turnback.Turnback, reviewed: Reviewed
) -> None:
    tb.gc(keep=1, older_than=0)
    sid = reviewed.session
    shown = client.get(f"/api/sessions/{sid}/turns/1/diff")  # the stored files, and so
    assert shown.status_code == 200 and shown.json()["available"] is False
    for path in (
        f"/api/sessions/{sid}/turns/1/patch?path=app.py",
        f"/api/sessions/{sid}/range?from=0&to=1",
        f"/api/sessions/{sid}/revert-plan?to_turn=1",
    ):
        answer = client.get(path)
        assert answer.status_code == 409, (path, answer.text)
        error = answer.json()["error"]
        assert error["type"] == "CheckpointUnavailable" and "activities" in error["hint"], error


# -- actions --------------------------------------------------------------------------------


def test_a_rescue_is_refused_clearly_without_paths_and_is_no_action_when_read_only(
    client: TestClient, tb: turnback.Turnback, reviewed: Reviewed
) -> None:
    sid = reviewed.session
    points = client.get(f"/api/sessions/{sid}/turns/1/points")
    assert points.status_code == 200 and points.json()["tools"] == []
    for body in ({"turn": 1}, {"turn": 1, "paths": []}, {"turn": 1, "paths": [3]}):
        answer = client.post(f"/api/sessions/{sid}/rescue", json=body)
        assert answer.status_code == 400, (body, answer.text)
        assert "paths" in answer.json()["error"]["message"]
    outside = client.post(f"/api/sessions/{sid}/rescue", json={"turn": 1, "paths": ["../x"]})
    assert outside.status_code >= 400 and "outside the workspace" in outside.text
    assert client.post(f"/api/sessions/{sid}/rescue", json={"undo": True}).status_code == 409
    assert tb.session(sid).rescues() == []
    read_only = client_for(tb, read_only=True)
    refused = read_only.post(f"/api/sessions/{sid}/rescue", json={"undo": True})
    assert refused.status_code in (404, 405)


def test_the_revert_plan_is_the_cli_dry_run_and_writes_nothing(
    client: TestClient, reviewed: Reviewed, tb: turnback.Turnback
) -> None:
    sid, workspace = reviewed.session, reviewed.workspace
    (workspace / "app.py").write_text("my own edit\n")
    before = files(workspace)

    plain = client.get(f"/api/sessions/{sid}/revert-plan", params={"to_turn": 1})
    keeping = client.get(
        f"/api/sessions/{sid}/revert-plan", params={"to_turn": 1, "keep_user_edits": "1"}
    )
    bad = client.get(f"/api/sessions/{sid}/revert-plan", params={"to_turn": "x"})

    assert plain.json() == cli_json(reviewed.home, "revert", sid, "1", "--dry-run")
    assert keeping.json() == cli_json(
        reviewed.home, "revert", sid, "1", "--dry-run", "--keep-user-edits"
    )
    assert [f["path"] for f in plain.json()["delete"]] == ["CHANGES.md"]
    assert [f["path"] for f in plain.json()["conflicts"]] == ["app.py"]
    assert [(f["path"], f["reason"]) for f in plain.json()["keep"]] == [
        ("by-hand.txt", "pre-existing")
    ]
    assert bad.status_code == 400 and "to_turn" in bad.json()["error"]["message"]
    assert files(workspace) == before
    assert tb.session(sid).reverts() == []


def test_revert_and_undo_move_the_files_and_say_so(
    client: TestClient, reviewed: Reviewed, tb: turnback.Turnback
) -> None:
    sid, workspace = reviewed.session, reviewed.workspace
    before = files(workspace)

    done = post(client, f"/api/sessions/{sid}/revert", {"to_turn": 1, "scope": "both"})

    assert done.status_code == 200, done.text
    assert done.json()["state"] == "committed" and done.json()["to_turn"]
    assert (workspace / "app.py").read_text() == 'def main():\n    return "one"\n'
    assert (workspace / "by-hand.txt").exists()  # it existed before turn 2 began
    log = client.get(f"/api/sessions/{sid}/log").json()
    assert [t["reverted_by"] is not None for t in log["turns"]] == [False, True, True]
    assert [r["state"] for r in log["reverts"]] == ["committed"]

    undone = post(client, f"/api/sessions/{sid}/undo", {})

    assert undone.status_code == 200 and undone.json()["state"] == "undone"
    assert files(workspace) == before
    assert len([t for t in tb.session(sid).turns() if t.in_conversation]) == 3


def test_a_refused_action_says_what_happened_and_what_to_do_and_changes_nothing(
    client: TestClient, reviewed: Reviewed, tb: turnback.Turnback
) -> None:
    sid, workspace = reviewed.session, reviewed.workspace
    (workspace / "app.py").write_text("edited by hand after turn 3\n")
    before = files(workspace)

    nothing = post(client, f"/api/sessions/{sid}/undo", {})
    conflict = post(client, f"/api/sessions/{sid}/revert", {"to_turn": 1, "keep_user_edits": True})
    too_far = post(client, f"/api/sessions/{sid}/revert", {"to_turn": 7})
    bad_scope = post(client, f"/api/sessions/{sid}/revert", {"to_turn": 1, "scope": "all"})
    not_json = client.post(f"/api/sessions/{sid}/revert", content=b"{")

    assert nothing.status_code == 409 and nothing.json()["error"]["type"] == "NothingToRevert"
    assert conflict.status_code == 409
    error = conflict.json()["error"]
    assert error["type"] == "RevertConflict" and error["paths"] == ["app.py"]
    assert "edits" in error["hint"]
    assert too_far.status_code == 404 and "turns 1 to 3" in too_far.json()["error"]["message"]
    assert bad_scope.status_code == 400 and "scope" in bad_scope.json()["error"]["message"]
    assert not_json.status_code == 400
    assert files(workspace) == before
    assert [r.state for r in tb.session(sid).reverts()] == ["rolled_back"]  # the conflict's


def test_the_page_words_what_settles_an_error_from_its_remedy(
    client: TestClient, reviewed: Reviewed, tb: turnback.Turnback
) -> None:
    sid = reviewed.session
    with tb.session(sid).turn("busy"):
        busy = post(client, f"/api/sessions/{sid}/revert", {"to_turn": 1})
    assert busy.status_code == 409
    error = busy.json()["error"]
    assert (error["type"], error["turn"], error["state"], error["remedy"]) == (
        "TurnInProgress",
        4,
        "running",
        "wait",
    )
    assert error["hint"].startswith("Wait until turn 4 ends (this page shows it live)")
    assert [t.number for t in tb.session(sid).turns()] == [1, 2, 3, 4]
    assert tb.session(sid).reverts() == []

    from turnback.errors import RECOVER, RevertInProgress, WorkspaceError
    from turnback.ui.app import error_json

    _, left = error_json(WorkspaceError("rolling the revert back failed", remedy=RECOVER))
    assert left["error"]["hint"].startswith("It was left half done by a program that stopped")
    _, held = error_json(RevertInProgress("the workspace is being reverted", 7, None))
    assert held["error"]["hint"].startswith("Wait until the other revert or undo ends")
    for body in (error, left["error"], held["error"]):
        assert "`turnback recover` in a terminal" in body["hint"]  # the page cannot do it


def test_an_action_without_the_key_is_refused(
    client: TestClient, reviewed: Reviewed, tb: turnback.Turnback
) -> None:
    sid = reviewed.session
    forged = client.post(
        f"/api/sessions/{sid}/revert", json={"to_turn": 0}, headers={"authorization": ""}
    )
    wrong = client.post(
        f"/api/sessions/{sid}/revert", json={"to_turn": 0}, headers={"authorization": "Bearer x"}
    )

    assert forged.status_code == 401 and wrong.status_code == 403
    assert tb.session(sid).reverts() == []
    assert (reviewed.workspace / "app.py").exists()


def test_read_only_serves_no_action(tb: turnback.Turnback, reviewed: Reviewed) -> None:
    client = client_for(tb, read_only=True)
    sid = reviewed.session
    for path in ("revert", "undo", "review-mark"):
        answer = post(client, f"/api/sessions/{sid}/{path}", {"to_turn": 0, "turn": 1})
        assert answer.status_code in (404, 405), path
    page = client.get(f"/sessions/{sid}").text
    assert '"readOnly": true' in page
    assert tb.session(sid).reverts() == []
    assert client.get(f"/api/sessions/{sid}/log").status_code == 200


def test_the_review_mark_is_kept_with_the_session(
    client: TestClient, reviewed: Reviewed, tb: turnback.Turnback
) -> None:
    sid = reviewed.session
    assert client.get(f"/api/sessions/{sid}/timeline").json()["review_mark"] is None

    assert post(client, f"/api/sessions/{sid}/review-mark", {"turn": 2}).json() == {
        "review_mark": 2
    }
    refused = post(client, f"/api/sessions/{sid}/review-mark", {"turn": 4})

    assert refused.status_code == 404
    assert client.get(f"/api/sessions/{sid}/timeline").json()["review_mark"] == 2
    assert any(a.code == "review.marked" for a in tb.session(sid).activities())


def test_set_aside_turns_are_applied_or_discarded(
    client: TestClient, reviewed: Reviewed, tb: turnback.Turnback, abandoned_turn: object
) -> None:
    sid = reviewed.session
    session = tb.session(sid)
    stale = abandoned_turn(session, [])  # type: ignore[operator]
    second = session.get_turn(2).token
    with tb.store.atomic() as tx:  # the session moved on meanwhile: no fast-forward
        tx.set_head(sid, second, time.time())
    tb.recover()
    timeline = client.get(f"/api/sessions/{sid}/timeline").json()
    assert [u["token"] for u in timeline["unrecovered"]] == [stale.token]

    discarded = post(client, f"/api/sessions/{sid}/unrecovered/{stale.token[:10]}/discard", {})
    unknown = post(client, f"/api/sessions/{sid}/unrecovered/{stale.token}/eat", {})

    assert discarded.status_code == 200 and discarded.json()["events"] == 0
    assert unknown.status_code == 404
    assert client.get(f"/api/sessions/{sid}/timeline").json()["unrecovered"] == []


# -- live updates -----------------------------------------------------------------------------


def test_the_stream_sends_a_running_turn_as_it_grows(
    client: TestClient, reviewed: Reviewed, tb: turnback.Turnback
) -> None:
    session = tb.session(reviewed.session)
    turn = session.turn("keep going")
    say(turn, "first words")
    tb.journal.flush()
    seen: list[str] = []
    with client.stream("GET", f"/api/sessions/{reviewed.session}/stream") as events:
        for line in events.iter_lines():
            if line.startswith("event: "):
                seen.append(line[7:])
            if line.startswith("data: ") and seen[-1] == "running":
                data = json.loads(line[6:])
                assert data["turn"]["status"] == "running"
                assert data["messages"][-1]["text"] == "first words"
                break
    turn.complete()
    assert seen[:2] == ["log", "running"]


# -- the command ----------------------------------------------------------------------------


def test_turnback_ui_prints_its_address_first_and_stops_on_sigterm(
    reviewed: Reviewed, start_server: StartServer
) -> None:
    server = start_server(reviewed.home)

    assert server.url.startswith("http://127.0.0.1:") and "/#token=" in server.url
    refused = httpx.get(f"{server.base}/api/sessions")
    key = server.key()
    listed = httpx.get(f"{server.base}/api/sessions", headers={"authorization": f"Bearer {key}"})

    assert refused.status_code == 401
    assert [s["id"] for s in listed.json()] == [reviewed.session]
    assert server.stop() == 0


def test_the_browser_is_opened_on_a_one_time_address(
    reviewed: Reviewed, start_server: StartServer, tmp_path: Path
) -> None:
    """A command line can be read by every user of the machine: the browser's carries a token
    that logs in once, not the printed one."""
    seen = tmp_path / "browser-was-given"
    browser = tmp_path / "browser"
    browser.write_text(f'#!/bin/sh\necho "$1" > {seen}\n')
    browser.chmod(0o755)
    process = subprocess.Popen(
        [TURNBACK, "--home", str(reviewed.home), "ui"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "BROWSER": f"{browser} %s"},
    )
    try:
        assert process.stdout is not None
        printed = process.stdout.readline().strip()
        deadline = time.monotonic() + 20
        while not seen.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        opened = seen.read_text().strip()
        base, once = opened.split("/#token=")

        assert printed.startswith(base) and once != printed.split("#token=")[1]
        first = httpx.post(f"{base}/api/login", json={"token": once})
        again = httpx.post(f"{base}/api/login", json={"token": once})
        assert first.status_code == 200 and again.status_code == 403
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0


def test_served_on_every_address_it_prints_one_another_machine_can_use(
    reviewed: Reviewed, start_server: StartServer
) -> None:
    server = start_server(reviewed.home, "--host", "0.0.0.0")
    shown = httpx.URL(server.url)
    port = shown.port

    assert shown.host not in ("0.0.0.0", "127.0.0.1", "localhost")
    with socket.socket() as probe:  # an address of this machine: it can be bound here
        probe.bind((shown.host, 0))
    # what another machine's browser sends, sent over loopback here: its Host is accepted
    as_from_afar = {"host": f"{shown.host}:{port}"}
    page = httpx.get(f"http://127.0.0.1:{port}/", headers=as_from_afar)
    login = httpx.post(
        f"http://127.0.0.1:{port}/api/login", json={"token": server.token}, headers=as_from_afar
    )
    assert page.status_code == 200 and login.status_code == 200


def test_turnback_ui_refuses_a_home_without_sessions_and_a_taken_port(
    tmp_path: Path, reviewed: Reviewed, start_server: StartServer
) -> None:
    empty = subprocess.run(
        [TURNBACK, "--home", str(tmp_path / "none"), "ui"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    server = start_server(reviewed.home)
    port = server.base.rsplit(":", 1)[1]
    taken = subprocess.run(
        [
            TURNBACK,
            "--home",
            str(reviewed.home),
            "ui",
            "--no-open",
            "--port",
            port,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert empty.returncode == 1 and "error:" in empty.stderr
    assert not (tmp_path / "none" / "turnback.db").exists()
    assert taken.returncode == 1
    assert f"cannot serve on 127.0.0.1:{port}" in taken.stderr and "--port" in taken.stderr
