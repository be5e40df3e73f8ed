"""The page at ``/`` in a real browser: Debian's Chromium (``/usr/bin/chromium``) driven
by Playwright for Python, against a live server on the simulator.

Skipped when Chromium or the ``playwright`` package is missing. Playwright's own browser
download is never used; set it up with ``pip install playwright`` and
``apt-get install -y --no-install-recommends chromium``."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import kalypso
from kalypso.client import Client

from .conftest import LiveServer
from .plans import review_plan, word_count

try:
    from playwright.sync_api import Browser, Page, expect, sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    pytest.skip(
        "the page tests need the playwright package (pip install playwright)",
        allow_module_level=True,
    )

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():  # pragma: no cover - depends on the machine
    pytest.skip(
        f"the page tests need Chromium at {CHROMIUM}"
        " (apt-get install -y --no-install-recommends chromium)",
        allow_module_level=True,
    )

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 20_000
TOKEN_KEY = "kalypso.token"


@dataclass
class Tab:
    """A page in a fresh browser context, and what went wrong in it: console errors,
    uncaught exceptions and dialogs (an ``alert`` would mean injected script ran)."""

    page: Page
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def sign_in(self, url: str, token: str) -> None:
        response = self.page.goto(url + "/")
        assert response is not None and response.ok
        assert "script-src 'self'" in response.headers["content-security-policy"]
        self.page.get_by_label("API token").fill(token)
        self.page.get_by_role("button", name="Show my jobs").click()

    def stored_token(self) -> Any:
        return self.page.evaluate(f"sessionStorage.getItem({TOKEN_KEY!r})")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def tab(browser: Browser) -> Iterator[Tab]:
    context = browser.new_context(viewport={"width": 1200, "height": 1000})
    try:
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        found = Tab(page)

        def on_console(message: Any) -> None:
            if message.type == "error":
                found.errors.append(f"{message.text} ({message.location['url']})")

        def on_dialog(dialog: Any) -> None:
            found.dialogs.append(dialog.message)
            dialog.dismiss()

        page.on("console", on_console)
        page.on("pageerror", lambda exc: found.errors.append(str(exc)))
        page.on("dialog", on_dialog)
        yield found
    finally:
        context.close()


def distinct_colors(png: bytes) -> int:
    """How many colors a screenshot has (1 for a blank page)."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        colors = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colors is not None
    return len(colors)


def test_the_page_shows_a_finished_job(live: LiveServer, tab: Tab, tmp_path: Path) -> None:
    page = tab.page
    token = live.token("pat")
    with Client(live.url, token) as client:
        job_id = client.submit(review_plan(40))["id"]
        tab.sign_in(live.url, token)
        status = page.locator(f'#jobs-body [data-job-id="{job_id}"]')
        expect(status).to_have_attribute("data-status", "completed", timeout=WAIT_MS)
        expect(status).to_have_text("completed")
        done = client.status(job_id)
        result = client.result(job_id)
    assert done["status"] == "completed" and done["result_rows"] == len(result) > 0

    page.get_by_role("button", name=f"Show job {job_id}").click()
    expect(page.locator("#job-id")).to_have_text(job_id)
    stages = page.locator("#stages-body tr")
    expect(stages).to_have_count(len(done["progress"]["stages"]))
    assert stages.count() > 0
    expect(page.get_by_role("table", name="Stages")).to_be_visible()
    expect(page.get_by_role("table", name="Result")).to_be_visible()
    expect(page.locator("#result-body tr")).to_have_count(done["result_rows"])
    headers = page.locator("#result-head th").all_text_contents()
    assert headers == list(result.columns)
    first = page.locator("#result-body tr").first.locator("td").all_text_contents()
    assert first == [str(v) for v in result.iloc[0]]
    expect(page.locator("#kv-chart canvas").first).to_be_visible()
    expect(page.locator("#cancel")).to_be_hidden()
    expect(page.get_by_role("alert")).to_be_hidden()

    screenshot = page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
    assert distinct_colors(screenshot) > 20
    assert tab.stored_token() == token and token not in page.url
    page.reload()  # the token is kept for the tab: no second sign-in
    expect(status).to_have_attribute("data-status", "completed")
    expect(page.get_by_label("API token")).to_be_hidden()
    assert tab.errors == [] and tab.dialogs == []


def test_values_are_shown_as_text_not_markup(live: LiveServer, tab: Tab) -> None:
    page = tab.page
    nasty = '<img src=x onerror="alert(1)"><b>bold</b>'
    plan = kalypso.table([{"id": 1, "text": nasty}], name="reviews").map(word_count, "words")
    token = live.token("quinn")
    with Client(live.url, token) as client:
        job_id = client.submit(plan)["id"]
        client.wait(job_id)
    tab.sign_in(live.url, token)
    expect(page.locator(f'[data-job-id="{job_id}"]')).to_have_attribute("data-status", "completed")
    cells = page.locator("#result-body td")
    expect(cells.nth(1)).to_have_text(nasty)
    assert page.locator("#result-body img, #result-body b").count() == 0
    assert tab.dialogs == [] and tab.errors == []


def test_a_wrong_token_shows_an_error_not_jobs(live: LiveServer, tab: Tab) -> None:
    page = tab.page
    with Client(live.url, live.token("rita")) as client:
        client.wait(client.submit(review_plan(2))["id"])
    tab.sign_in(live.url, "kal_not_a_token")
    alert = page.get_by_role("alert")
    expect(alert).to_be_visible()
    expect(alert).to_contain_text("unknown or revoked")
    expect(page.locator("#jobs")).to_be_hidden()
    expect(page.locator("[data-job-id]")).to_have_count(0)
    expect(page.get_by_label("API token")).to_be_visible()
    assert tab.stored_token() is None
