"""Every page of the dashboard over HTTP (ui/pages.py): what each shows of the data, its
live region alone when the page's script asks, and its answers to bad input."""

from __future__ import annotations

import re
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from starlette.testclient import TestClient

import awa_fast
from awa_fast.db.queries import Q
from awa_fast.lifecycle.schedules import periodic_job
from tests.admin.test_catalog import Report
from tests.factories import finish_jobs, insert_followup, insert_job
from tests.ui.conftest import get

TRACE = 'Traceback (most recent call last):\n  File "billing.py", line 7\nValueError: declined'


def _failed(conn: psycopg.Connection[Any], *, queue: str = "payments") -> int:
    job_id = insert_job(conn, kind="charge_card", queue=queue, args={"order": 42})
    errors = [
        {"error": "TimeoutError: slow", "attempt": 1, "at": "2026-01-01T10:00:00+00:00"},
        {
            "error": "ValueError: declined",
            "attempt": 2,
            "at": "2026-01-01T10:05:00+00:00",
            "terminal": True,
            "traceback": TRACE,
        },
    ]
    finish_jobs(conn, "failed", [job_id], attempt=2, errors=errors, tags=["vip"])
    return job_id


def _cells(html: str, queue: str) -> list[str]:
    """The overview's row of ``queue``, cell by cell, as text."""
    row = re.search(rf'<tr data-queue="{queue}">(.*?)</tr>', html, re.DOTALL)
    assert row is not None, html
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.DOTALL)
    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in cells]


def test_overview_shows_each_queue_by_state_with_its_history(
    http: TestClient, client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    for state in ("available", "available", "running", "scheduled", "retryable"):
        insert_job(conn, queue="email", state=state)
    finish_jobs(conn, "completed", [insert_job(conn, queue="email")])
    _failed(conn, queue="email")
    client.pause_queue("email", paused_by="ops")
    html = get(http, "/").text
    cells = _cells(html, "email")
    # queue, available, running, scheduled, retryable, waiting, failed, cancelled, dead,
    # oldest available, done in the window, failure rate
    assert cells[:9] == ["email", "2", "1", "1", "1", "0", "1", "0", "0"]
    assert cells[10:12] == ["2", "50.0%"]
    assert "paused" in cells[-1]
    assert html.count('<rect class="fail"') > 0 and "tallest bar 2" in html
    assert "No host is running." in html and "no host holds the term" in html


def test_overview_shows_hosts_and_the_leader(
    http: TestClient, conn: psycopg.Connection[Any]
) -> None:
    conn.execute(Q.host_register, {"name": "web-1:100", "queues": Jsonb({})})
    conn.execute(
        "UPDATE awa_fast.leader SET term = 1, holder = 'web-1 pid 100 abc',"
        " expires_at = now() + interval '1 minute'"
    )
    html = get(http, "/").text
    assert "web-1:100" in html and '<span class="badge leader">leader</span>' in html
    assert "web-1 pid 100 abc (term 1" in html


def test_overview_and_queue_page_show_how_live_hosts_serve_a_queue(
    http: TestClient, conn: psycopg.Connection[Any]
) -> None:
    """Concurrency summed over the live hosts' rows, each host's rate limit; a stale
    host's row counts for nothing."""
    served = (("web-1:1", 4, [5, 2]), ("web-2:2", 3, [5, 2]), ("old:3", 100, [9, 1]))
    for name, concurrency, limit in served:
        queues = {"q<b>": {"concurrency": concurrency, "rate_limit": limit, "prefetch": 1}}
        conn.execute(Q.host_register, {"name": name, "queues": Jsonb(queues)})
    conn.execute(
        "UPDATE awa_fast.hosts SET heartbeat_at = now() - interval '1 day' WHERE name = 'old:3'"
    )
    html = get(http, "/").text
    assert "q&lt;b&gt;" in html and "q<b>" not in html
    assert _cells(html, "q&lt;b&gt;")[-3:-1] == ["7", "5/s, burst 2"]
    page = get(http, "/queue", params={"name": "q<b>"}).text
    assert "<strong>7</strong>concurrency" in page
    assert "<strong>5/s, burst 2</strong>rate limit per host" in page


def test_the_live_region_comes_alone_when_the_script_asks(http: TestClient) -> None:
    page = get(http, "/").text
    live = get(http, "/", headers={"X-Awa-Live": "1"}).text
    assert 'data-live="3000"' in page and "<html" in page
    assert "<html" not in live and "<h2>Queues</h2>" in live


def test_ranges_pick_the_charts_window(http: TestClient) -> None:
    assert get(http, "/?range=24h").text.count("<g><title>") == 48
    assert get(http, "/queue?name=q&range=15m").text.count("<g><title>") == 15
    assert http.get("/?range=1y").status_code == 400


def test_queue_page_shows_its_counts_actions_and_latest_jobs(
    http: TestClient, client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    failed = _failed(conn)
    insert_job(conn, queue="payments", state="available")
    html = get(http, "/queue?name=payments").text
    counts = dict(re.findall(r'data-state="(\w+)"><strong>(\d+)</strong>', html))
    assert (counts["failed"], counts["available"], counts["running"]) == ("1", "1", "0")
    assert 'data-action="pause"' in html and 'data-action="resume"' not in html
    assert f'href="/jobs/{failed}"' in html
    client.pause_queue("payments")
    html = get(http, "/queue?name=payments").text
    assert 'data-action="resume"' in html and 'data-action="pause"' not in html
    assert http.get("/queue").status_code == 400


def test_jobs_list_filters_and_pages(
    http: TestClient, client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    ids = [insert_job(conn, queue="q", kind="k", args={"n": i}) for i in range(60)]
    other = insert_job(conn, queue="other")
    html = get(http, "/jobs?queue=q").text
    shown = [int(i) for i in re.findall(r'class="job-link">(\d+)<', html)]
    assert shown == ids[::-1][:50]
    older = re.search(r'class="older" href="([^"]+)"', html)
    assert older is not None
    rest = get(http, older.group(1).replace("&amp;", "&")).text
    assert [int(i) for i in re.findall(r'class="job-link">(\d+)<', rest)] == ids[::-1][50:]
    assert 'class="older"' not in rest
    assert 'name="queue" value="q"' in html  # the filter form keeps what was asked
    by_id = get(http, f"/jobs?q={other}").text
    assert re.findall(r'class="job-link">(\d+)<', by_id) == [str(other)]
    by_args = get(http, "/jobs?q=%22n%22%3A%2059").text
    assert re.findall(r'class="job-link">(\d+)<', by_args) == [str(ids[59])]
    huge = "9" * 30  # no id that large: text to find in args instead
    assert 'class="empty"' in get(http, f"/jobs?q={huge}").text
    assert http.get("/jobs?state=exploded").status_code == 400
    assert http.get("/jobs?before=x").status_code == 400
    assert http.get("/jobs?kind=a%00b").status_code == 400


def test_job_page_shows_args_errors_tracebacks_and_timeline(
    http: TestClient, conn: psycopg.Connection[Any]
) -> None:
    job_id = _failed(conn)
    conn.execute(
        'UPDATE awa_fast.jobs_done SET metadata = \'{"trace_id": "t-1"}\','
        " progress = '{\"percent\": 40}' WHERE id = %s",
        (job_id,),
    )
    html = get(http, f"/jobs/{job_id}").text
    assert "&#34;order&#34;: 42" in html and "&#34;trace_id&#34;: &#34;t-1&#34;" in html
    assert "&#34;percent&#34;: 40" in html
    assert "File &#34;billing.py&#34;, line 7" in html  # the traceback, escaped
    assert html.index("ValueError: declined") < html.index("TimeoutError: slow")  # latest first
    assert "Attempt 1 failed" in html and "Failed after 2 attempts" in html
    assert 'data-action="retry"' in html and 'data-action="delete"' in html
    assert 'data-action="cancel"' not in html
    assert "data-live" not in html  # a finished job changes no more


def test_job_page_of_a_job_parked_on_a_callback_and_of_a_dead_one(
    http: TestClient, client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    parked = insert_job(conn, state="waiting_external")
    conn.execute(
        "UPDATE awa_fast.jobs_hot SET callback_id = '6b1f3b4e-0000-4000-8000-000000000001',"
        " callback_timeout_at = now() + interval '1 hour' WHERE id = %s",
        (parked,),
    )
    html = get(http, f"/jobs/{parked}").text
    assert "6b1f3b4e-0000-4000-8000-000000000001" in html and "data-live" in html
    assert 'data-action="cancel"' in html and 'data-action="retry"' in html
    dead = _failed(conn)
    client.move_failed_to_dlq(dead, "card declined for good")
    html = get(http, f"/jobs/{dead}").text
    assert "s-dead-lettered" in html and "card declined for good" in html
    assert 'data-action="dlq_retry"' in html and 'data-action="dlq_purge"' in html
    assert http.get("/jobs/999999").status_code == 404
    assert http.get("/jobs/" + "9" * 30).status_code == 400


def test_job_page_lists_its_followups_and_a_followup_links_its_parent(
    http: TestClient, client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    parent = _failed(conn)
    html = get(http, f"/jobs/{parent}").text
    assert "No follow-up was" in html and 'id="parent"' not in html
    first = insert_followup(conn, parent, queue="receipts")
    second = insert_followup(conn, parent, kind="audit")
    finish_jobs(conn, "completed", [second])
    html = get(http, f"/jobs/{parent}").text
    followups = html[html.index('id="followups"') :]
    assert followups.count('class="job-link"') == 2
    assert f'href="/jobs/{first}"' in followups and f'href="/jobs/{second}"' in followups
    assert "audit" in followups and "s-completed" in followups and "s-available" in followups
    assert 'href="/queue?name=receipts"' in followups
    html = get(http, f"/jobs/{first}").text
    assert f'<a href="/jobs/{parent}" id="parent">job {parent}</a>' in html
    assert "No follow-up was" in html


def test_dlq_page_lists_filters_and_pages(
    http: TestClient, client: awa_fast.Client, conn: psycopg.Connection[Any]
) -> None:
    for i in range(52):
        _failed(conn, queue="payments" if i % 2 else "email")
    client.bulk_move_failed_to_dlq(allow_all=True, reason="gave up")
    html = get(http, "/dlq").text
    assert "52 matching" in html and html.count('class="job-link"') == 50
    older = re.search(r'class="older" href="([^"]+)"', html)
    assert older is not None
    assert get(http, older.group(1).replace("&amp;", "&")).text.count('class="job-link"') == 2
    assert "26 matching" in get(http, "/dlq?queue=email").text


def test_periodic_page_lists_schedules_with_their_next_fire(
    http: TestClient, conn: psycopg.Connection[Any]
) -> None:
    schedule = periodic_job("nightly", "0 3 * * *", Report, Report("x"), queue="reports")
    conn.execute(Q.cron_register, schedule.params())
    html = get(http, "/periodic").text
    assert "nightly" in html and "0 3 * * *" in html and "03:00:00Z" in html
    assert 'data-action="run_periodic"' in html


def test_batches_page_lists_operations_with_a_stop_for_unfinished_ones(
    http: TestClient, client: awa_fast.Client
) -> None:
    client.insert({}, kind="k", queue="q")
    operation = client.set_priority(1, filter={"queue": "q"}, submitted_by="ops")
    html = get(http, "/batches").text
    assert operation["id"] in html and "set_priority" in html and "ops" in html
    assert 'data-action="batch_cancel"' in html
    assert operation["id"] in get(http, "/").text  # in progress, on the overview too
