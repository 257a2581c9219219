"""The review page in a real browser: Debian's Chromium driven by Playwright against a real
``turnback ui`` process. Each test keeps a screenshot of what it saw under test-artifacts/ui/."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench.browser import WIDE, launch
from playwright.sync_api import BrowserContext, Page, Playwright, expect, sync_playwright

import turnback

from .conftest import TURNBACK, Reviewed, StartServer, say

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
    """Serve ``home``, take the token's cookie, and open ``path`` once it is drawn."""
    server = start_server(home)
    page.goto(server.url)
    page.goto(server.base + path)
    ready(page)


def test_without_the_token_the_page_is_refused(
    page: Page, reviewed: Reviewed, start_server: StartServer
) -> None:
    server = start_server(reviewed.home)

    answer = page.goto(f"{server.base}/sessions/{reviewed.session}")

    assert answer is not None and answer.status == 401
    expect(page.locator("h1")).to_have_text("No access")
    expect(page.locator("body")).not_to_contain_text("review me")
    wrong = page.goto(f"{server.base}/?token=guessed")
    assert wrong is not None and wrong.status == 403
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
    shot(page, "sessions")
    page.get_by_role("link", name="demo").click()
    ready(page)

    nodes = page.locator("li.node")
    expect(nodes).to_have_count(3)
    expect(nodes.nth(0)).to_contain_text("#1")
    expect(nodes.nth(0)).to_contain_text("greet.py")
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
    shot(page, "turn-narrow")
    assert page.evaluate("document.documentElement.scrollWidth") <= NARROW["width"]
    page.set_viewport_size(WIDE)
    page.keyboard.press("]")
    ready(page)
    expect(page.locator("h1")).to_have_text("Turn 3")


def test_a_revert_is_previewed_confirmed_and_undone(
    page: Page, reviewed: Reviewed, start_server: StartServer
) -> None:
    workspace = reviewed.workspace
    open_page(page, start_server, reviewed.home, f"/sessions/{reviewed.session}")

    page.locator("li.node").nth(0).get_by_role("button", name="Revert to here…").click()
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

    expect(page.locator("li.mark.revert")).to_contain_text("undone")
    assert (workspace / "app.py").read_text() == 'def main():\n    return "two"\n'
    assert (workspace / "CHANGES.md").read_text() == "# Changes\n"
    expect(page.locator("li.node.reverted")).to_have_count(0)
    shot(page, "undone")


def test_a_revert_that_would_fail_is_shown_so_and_a_refused_one_says_what_to_do(
    page: Page, reviewed: Reviewed, start_server: StartServer
) -> None:
    (reviewed.workspace / "app.py").write_text("my own edit\n")
    open_page(page, start_server, reviewed.home, f"/sessions/{reviewed.session}")

    page.locator("li.node").nth(0).get_by_role("button", name="Revert to here…").click()
    dialog = page.get_by_role("dialog")
    confirm = dialog.get_by_role("button", name="Revert to turn 1")
    expect(dialog.locator(".plan-conflict")).to_contain_text("the revert overwrites it")
    expect(confirm).to_be_enabled()
    dialog.get_by_label("Keep my edits").check()
    expect(dialog.locator(".plan-conflict")).to_contain_text("clashes")
    expect(confirm).to_be_disabled()  # it would be refused: no pointless click
    shot(page, "revert-conflict")
    dialog.get_by_label("Keep my edits").uncheck()
    expect(confirm).to_be_enabled()

    with turnback.open(reviewed.home) as tb:  # a turn begins while the dialog is open
        running = tb.session(reviewed.session).turn("meanwhile")
        confirm.click()
        alert = dialog.get_by_role("alert")
        expect(alert).to_contain_text("What happened")
        expect(alert).to_contain_text("is running")
        expect(alert).to_contain_text("Wait until turn 4 ends (this page shows it live)")
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
    expect(page.locator("li.node").nth(3)).to_contain_text("completed")


def test_since_i_last_looked_shows_what_came_after_the_review_mark(
    page: Page, reviewed: Reviewed, start_server: StartServer
) -> None:
    open_page(page, start_server, reviewed.home, f"/sessions/{reviewed.session}")

    page.get_by_role("button", name="Mark turns 1–3 reviewed").click()
    expect(page.get_by_role("button", name="Mark turns 1–3 reviewed")).to_have_count(0)
    with turnback.open(reviewed.home) as tb, tb.session(reviewed.session).turn("add a license"):
        (reviewed.workspace / "LICENSE").write_text("MIT\n")

    expect(page.locator("li.node").nth(3)).to_contain_text("new since review")
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
