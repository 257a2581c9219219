"""The review page's JSON API and its security, over HTTP: the token, the anti-forgery header,
--read-only, ids from the address, the CLI's --json shapes, actions and their errors."""

from __future__ import annotations

import json
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
    client.csrf = csrf_of(client)  # type: ignore[attr-defined]
    return client


def csrf_of(client: TestClient) -> str:
    page = client.get("/", params={"token": TOKEN})
    assert page.status_code == 303
    html = client.get("/").text
    config = html.split('<script id="config" type="application/json">')[1].split("</script>")[0]
    return str(json.loads(config)["csrf"])


@pytest.fixture
def client(tb: turnback.Turnback) -> TestClient:
    return client_for(tb)


def post(client: TestClient, path: str, body: object) -> httpx.Response:
    return client.post(path, json=body, headers={"x-turnback-csrf": client.csrf})  # type: ignore[attr-defined]


def files(workspace: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(workspace.iterdir()) if p.is_file()}


# -- the token ----------------------------------------------------------------------------------


def test_without_the_token_every_page_and_api_is_refused(tb: turnback.Turnback) -> None:
    app = build_app(tb, TOKEN, hosts=["testserver"])
    with TestClient(app, follow_redirects=False) as anonymous:
        page = anonymous.get("/")
        api = anonymous.get("/api/sessions")
        anonymous.cookies.set("turnback_80", "not-the-token")
        wrong = anonymous.get("/api/sessions")
        anonymous.cookies.clear()
        wrong_query = anonymous.get("/", params={"token": "guess"})
        asset = anonymous.get("/assets/app.js")

    assert page.status_code == 401 and "No access" in page.text and TOKEN not in page.text
    assert api.status_code == 401
    assert "token" in api.json()["error"]["hint"]
    assert wrong.status_code == 403
    assert wrong_query.status_code == 403 and "set-cookie" not in wrong_query.headers
    assert asset.status_code == 401


def test_the_token_is_swapped_once_for_a_strict_http_only_cookie(tb: turnback.Turnback) -> None:
    app = build_app(tb, TOKEN, hosts=["testserver"])
    with TestClient(app, follow_redirects=False) as browser:
        first = browser.get("/sessions/abc", params={"token": TOKEN, "x": "1"})
        then = browser.get("/api/sessions")

    assert first.status_code == 303
    assert first.headers["location"] == "/sessions/abc?x=1"  # the token leaves the address
    cookie = first.headers["set-cookie"]
    assert f"turnback_80={TOKEN}" in cookie
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert then.status_code == 200
    assert then.headers["x-frame-options"] == "DENY"
    assert "script-src 'self'" in then.headers["content-security-policy"]


def test_a_foreign_host_name_is_refused(client: TestClient) -> None:
    assert client.get("/api/sessions", headers={"host": "evil.example:80"}).status_code == 400


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


# -- actions --------------------------------------------------------------------------------


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
    not_json = client.post(
        f"/api/sessions/{sid}/revert",
        content=b"{",
        headers={"x-turnback-csrf": client.csrf},  # type: ignore[attr-defined]
    )

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


def test_an_action_without_the_anti_forgery_header_is_refused(
    client: TestClient, reviewed: Reviewed, tb: turnback.Turnback
) -> None:
    sid = reviewed.session
    forged = client.post(f"/api/sessions/{sid}/revert", json={"to_turn": 0})
    wrong = client.post(
        f"/api/sessions/{sid}/revert", json={"to_turn": 0}, headers={"x-turnback-csrf": "guess"}
    )

    assert forged.status_code == 403 and wrong.status_code == 403
    assert "anti-forgery" in forged.json()["error"]["message"]
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

    assert server.url.startswith("http://127.0.0.1:") and "/?token=" in server.url
    refused = httpx.get(f"{server.base}/api/sessions")
    with httpx.Client(base_url=server.base) as browser:
        browser.get(server.url)  # the cookie
        listed = browser.get("/api/sessions").json()

    assert refused.status_code == 401
    assert [s["id"] for s in listed] == [reviewed.session]
    assert server.stop() == 0


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
