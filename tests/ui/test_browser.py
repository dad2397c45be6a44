"""The dashboard in a real browser: Debian's chromium, headless, driven by Selenium, on
``awa-fast ui`` run as a user runs it, with a runner working the queues meanwhile. An
operator follows a queue to a failed job, reads its traceback, retries it and watches it
complete without reloading, follows the follow-up its completion inserted and back;
pauses a queue and sees claims stop, then resumes it. No
page logs a console error: a script the escaping let through would break the CSP, and
say so there.

With AWA_FAST_UI_SCREENSHOTS=DIR it saves the main pages there (docs/img holds them).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.wait import WebDriverWait

import awa_fast
from tests.helpers import free_port, job, wait_until

FAST = {"heartbeat_interval": 0.1, "rescue_interval": 0.1, "promote_interval": 0.05}
SHOTS = os.environ.get("AWA_FAST_UI_SCREENSHOTS")


@dataclass
class ChargeCard:
    order: int


@dataclass
class SendEmail:
    to: str


def _handlers(client: awa_fast.AsyncClient, go_ahead: threading.Event) -> None:
    """Order 7 is declined once; its retry waits for ``go_ahead``, so that the test sees
    it running before it completes, and then has its receipt sent (a follow-up, to a
    queue nothing works)."""

    @client.task(ChargeCard, queue="payments")
    async def charge(job: awa_fast.Job[ChargeCard]) -> None:
        if job.args.order != 7:
            return
        if not job.errors:
            raise ValueError(f"card declined for order {job.args.order}")
        await asyncio.to_thread(go_ahead.wait, 60)

    client.on_completed_enqueue(
        ChargeCard,
        lambda args, job, ctx: (
            awa_fast.InsertRequest(SendEmail("buyer@example.com"), queue="receipts")
            if args.order == 7
            else None
        ),
    )

    @client.task(SendEmail, queue="email")
    async def send(job: awa_fast.Job[SendEmail]) -> None:
        return None


@pytest.fixture
def go_ahead() -> threading.Event:
    return threading.Event()


@pytest.fixture
def runner(dsn: str, go_ahead: threading.Event) -> Iterator[awa_fast.AsyncClient]:
    """A client working payments and email on an event loop of its own thread."""
    client = awa_fast.AsyncClient(dsn)
    _handlers(client, go_ahead)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def run(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=60)

    run(client.start({"payments": 2, "email": 4}, **FAST))
    yield client
    run(client.shutdown())
    run(client.close())
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    loop.close()


def _leading(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT expires_at > now() FROM awa_fast.leader").fetchone()
    return row == (True,)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError):
        return False


@pytest.fixture
def dashboard(dsn: str, tmp_path: Path) -> Iterator[str]:
    """``awa-fast ui`` on a free loopback port, as a user starts it; its URL."""
    port = free_port()
    command = [sys.executable, "-m", "awa_fast", "ui", "--database-url", dsn, "--port", str(port)]
    log = tmp_path / "ui.log"
    url = f"http://127.0.0.1:{port}"
    with log.open("w") as err, subprocess.Popen(command, stdout=err, stderr=err) as server:
        try:
            wait_until(lambda: _answers(url) or server.poll() is not None, what="the dashboard")
            assert server.poll() is None, log.read_text()
            yield url
        finally:
            server.terminate()
            server.wait(timeout=30)


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    # --no-sandbox: CI runs it as root, where chromium's sandbox will not start.
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.add_argument("--window-size=1400,1000")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = webdriver.ChromeService(executable_path="/usr/bin/chromedriver")
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()


class Operator:
    """What a person at the dashboard does and sees, with every console error kept."""

    def __init__(self, driver: WebDriver, url: str) -> None:
        self.driver = driver
        self.url = url
        self.errors: list[dict[str, Any]] = []

    def check_console(self) -> None:
        self.errors += [e for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]
        assert self.errors == [], self.errors

    def open(self, path: str) -> None:
        self.driver.get(self.url + path)
        self.check_console()

    def find(self, css: str) -> WebElement:
        """The element, once the page has it (a click's page may still be loading)."""
        return WebDriverWait(self.driver, 30).until(lambda d: d.find_element(By.CSS_SELECTOR, css))

    def click(self, css: str) -> None:
        self.find(css).click()
        self.check_console()

    def text(self, css: str) -> str:
        return str(self.find(css).text)

    def wait_for(self, css: str, text: str) -> None:
        """Until the element shows ``text``: live regions refresh every few seconds, and
        replace the elements they hold."""
        passing = [NoSuchElementException, StaleElementReferenceException]
        WebDriverWait(self.driver, 30, ignored_exceptions=passing).until(
            lambda d: text in d.find_element(By.CSS_SELECTOR, css).text
        )

    def confirm(self, action: str, question: str, *, shot: str | None = None) -> str:
        """Press an action's button, read its question, confirm; back where it started.
        Returns what the action reported."""
        self.click(f'button[data-action="{action}"]')
        self.wait_for("h1", question)
        if shot:
            self.shoot(shot)
        self.click("#confirm")
        result = self.text("#result")
        self.click("#back")
        return result

    def shoot(self, name: str) -> None:
        if SHOTS:
            Path(SHOTS).mkdir(parents=True, exist_ok=True)
            self.driver.save_screenshot(str(Path(SHOTS) / f"ui-{name}.png"))


def test_an_operator_retries_a_failed_job_and_pauses_a_queue(
    dsn: str,
    runner: awa_fast.AsyncClient,
    go_ahead: threading.Event,
    dashboard: str,
    browser: WebDriver,
) -> None:
    with awa_fast.Client(dsn) as client:
        declined = client.insert(ChargeCard(7), queue="payments", max_attempts=1).id
        orders = [client.insert(ChargeCard(n), queue="payments").id for n in range(1, 4)]
        emails = [SendEmail(f"user{i}@example.com") for i in range(200)]
        client.insert_many(emails, queue="email")
        # Never run (no handler for it), shown on every page: escaped, or the CSP says so.
        client.insert({"html": "<script>alert(1)</script>"}, kind="<b>x</b>", queue="inbox")
        wait_until(lambda: job(dsn, declined)["state"] == "failed", what="the decline")
        # The hosts table shows no payments running below: every order has completed.
        wait_until(
            lambda: {job(dsn, order)["state"] for order in orders} == {"completed"},
            what="the orders",
            explain=lambda: [job(dsn, order) for order in orders],
        )
        wait_until(
            lambda: {s.queue: s for s in client.queue_stats()}["email"].completed_last_hour == 200,
            what="the emails",
        )

        wait_until(lambda: _leading(dsn), what="the runner's maintenance to lead")

        ui = Operator(browser, dashboard)
        ui.open("/")
        assert "leader" in ui.text("table.hosts") and "payments: " not in ui.text("table.hosts")
        ui.shoot("overview")
        ui.click('tr[data-queue="payments"] a.queue-link')
        ui.wait_for("h1", "Queue payments")
        ui.click('a[data-state="failed"]')
        ui.shoot("jobs")
        ui.click(f'a.job-link[href="/jobs/{declined}"]')
        trace = ui.text("pre.traceback")
        assert "Traceback (most recent call last)" in trace
        assert "ValueError: card declined for order 7" in trace
        ui.shoot("job")

        result = ui.confirm("retry", "Retry 1 job?", shot="confirm")
        assert result == "Retried 1 of 1 job."
        ui.wait_for("#job-state", "running")
        browser.execute_script("window.stillThisPage = true")
        go_ahead.set()
        ui.wait_for("#job-state", "completed")
        assert browser.execute_script("return window.stillThisPage") is True  # no reload
        ui.check_console()
        ui.wait_for("#followups", "receipts")
        ui.click("#followups a.job-link")
        ui.click("#parent")
        ui.wait_for("h1", f"Job {declined}")

        ui.click("h1 + span a")  # the job's queue
        assert ui.confirm("pause", 'Pause queue "payments"?') == 'Paused queue "payments".'
        ui.wait_for("section.actions", "paused by anonymous")
        held = client.insert(ChargeCard(8), queue="payments").id
        marker = client.insert(SendEmail("marker@example.com"), queue="email").id
        wait_until(lambda: job(dsn, marker)["state"] == "completed", what="the marker")
        assert job(dsn, held)["state"] == "available"  # the runner claims, not from payments
        ui.wait_for('a[data-state="available"]', "1")
        ui.shoot("queue")

        assert ui.confirm("resume", 'Resume queue "payments"?') == 'Resumed queue "payments".'
        wait_until(lambda: job(dsn, held)["state"] == "completed", what="the held job")
        ui.wait_for('a[data-state="available"]', "0")

        for path in ("/", "/jobs", "/dlq", "/periodic", "/batches", "/jobs?q=script"):
            ui.open(path)
        assert "<script>alert(1)</script>" in ui.text("table.jobs")  # shown as text
