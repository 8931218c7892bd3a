"""The schedules page in a real browser against a real ``mewdex serve``: a newcomer creates "every
weekday at 09:00 Asia/Shanghai, send me a 上班 meme" with the builder and sees the next five runs
(09:00 local = 01:00 UTC); the zone defaults to the browser's; the presets and the raw expression
stay in step; a bad expression is explained; pause/resume and the run history; screenshots
(desktop and 375 px, en and zh) with no horizontal scroll."""

from __future__ import annotations

import pytest

from ui_helpers import DESKTOP, SCREENSHOTS

NARROW = {"width": 375, "height": 812}


def _page(browser, viewport=DESKTOP, locale="en-US", timezone="Europe/Berlin"):
    context = browser.new_context(viewport=viewport, locale=locale, timezone_id=timezone)
    context.set_default_timeout(20_000)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    return context, pg, errors


def _next_runs(pg) -> list[str]:
    return pg.locator("#sched-next li").all_inner_texts()


def _delete_all(server) -> None:
    import httpx

    for job in server.get("/api/v1/schedules").json()["items"]:
        httpx.delete(f"{server.url}/api/v1/schedules/{job['id']}", timeout=30)


def test_a_newcomer_creates_a_weekday_0900_shanghai_schedule_and_sees_the_next_five_runs(browser, work_server):
    context, pg, errors = _page(browser)
    try:
        pg.goto(work_server.url + "/schedules")
        assert pg.input_value("#sched-tz") == "Europe/Berlin"  # the browser's zone by default
        pg.wait_for_function("() => document.querySelectorAll('#sched-next li').length === 5")
        pg.fill("#sched-name", "上班")
        pg.fill("#sched-prompt", "上班")
        assert pg.input_value("#sched-preset") == "weekdays"
        assert pg.locator("#sched-notify option").count() == 1  # no channel bound: only the conversation
        pg.fill("#sched-time", "09:00")
        pg.fill("#sched-tz", "Asia/Shanghai")
        assert pg.input_value("#sched-cron") == "0 9 * * 1-5"
        pg.wait_for_function(
            "() => [...document.querySelectorAll('#sched-next li')]"
            ".every(li => li.textContent.includes('Asia/Shanghai'))"
        )
        runs = _next_runs(pg)
        assert len(runs) == 5
        assert all("09:00" in r and "01:00 UTC" in r and "UTC+08:00" in r for r in runs), runs
        assert not any(r.startswith(("Sat", "Sun")) for r in runs), runs
        assert "Monday through Friday" in pg.inner_text("#sched-description")
        pg.screenshot(path=str(SCREENSHOTS / "schedules-builder-desktop-en.png"), full_page=True)
        pg.click("#sched-create")
        pg.wait_for_selector(".sched-job")
        job = pg.locator(".sched-job").first
        assert "上班" in job.inner_text() and "0 9 * * 1-5" in job.inner_text()
        assert "(01:00 UTC)" in job.inner_text()
        [saved] = work_server.get("/api/v1/schedules").json()["items"]
        assert (saved["cron"], saved["tz"], saved["prompt"]) == ("0 9 * * 1-5", "Asia/Shanghai", "上班")
        assert saved["next_run"]["local"][11:16] == "09:00" and saved["next_run"]["utc"][11:16] == "01:00"

        # presets and the raw expression stay in step
        pg.select_option("#sched-preset", "weekly")
        assert pg.input_value("#sched-cron") == "0 9 * * 1"  # every Monday at 09:00
        pg.select_option("#sched-preset", "daily")
        assert pg.input_value("#sched-cron") == "0 9 * * *"
        pg.fill("#sched-cron", "30 18 * * 5")
        assert pg.input_value("#sched-preset") == "weekly" and pg.input_value("#sched-day") == "5"
        assert pg.input_value("#sched-time") == "18:30"
        pg.fill("#sched-cron", "61 * * * *")
        pg.wait_for_selector("#sched-preview-error:not([hidden])")
        assert "not valid" in pg.inner_text("#sched-preview-error") and _next_runs(pg) == []

        # pause, resume, run history
        pg.click(".sched-job .sched-actions button >> nth=0")
        pg.wait_for_selector(".sched-job.is-off")
        assert "Paused" in pg.inner_text(".sched-job")
        pg.click(".sched-job .sched-actions button >> nth=0")
        pg.wait_for_selector(".sched-job:not(.is-off)")
        pg.click(".sched-job .sched-actions button >> nth=1")
        pg.wait_for_selector("#sched-runs:not([hidden])")
        assert "No runs yet" in pg.inner_text("#sched-runs-body")
        pg.screenshot(path=str(SCREENSHOTS / "schedules-desktop-en.png"), full_page=True)
    finally:
        context.close()
        _delete_all(work_server)
    assert not errors, errors


@pytest.mark.parametrize(
    "viewport,locale,name",
    [
        (NARROW, "en-US", "schedules-375-en"),
        (NARROW, "zh-CN", "schedules-375-zh"),
        (DESKTOP, "zh-CN", "schedules-desktop-zh"),
    ],
)
def test_screenshots_and_no_horizontal_scroll(browser, work_server, viewport, locale, name):
    import httpx

    made = httpx.post(
        f"{work_server.url}/api/v1/schedules",
        json={"name": "下班" if locale == "zh-CN" else "Monday morning", "prompt": "下班", "cron": "0 18 * * 1-5"},
        timeout=30,
    )
    assert made.status_code == 201, made.text
    context, pg, errors = _page(browser, viewport, locale, timezone="Asia/Shanghai")
    try:
        pg.goto(work_server.url + "/schedules")
        pg.wait_for_function("() => document.querySelectorAll('#sched-next li').length === 5")
        pg.wait_for_selector(".sched-job")
        if locale == "zh-CN":
            assert "定时任务" in pg.inner_text("h1")
        pg.click(".sched-job .sched-actions button >> nth=1")
        pg.wait_for_selector("#sched-runs:not([hidden])")
        assert pg.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        pg.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
    finally:
        context.close()
        _delete_all(work_server)
    assert not errors, errors
