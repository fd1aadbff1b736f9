"""Screenshot each view of a running console in headless Chromium (for docs/img/).

    python tools/console_screenshots.py URL TOKEN OUTDIR [JOB]

Signs in through the page's form with TOKEN, then saves fleet.png, job.png,
incidents.png, incident.png (the newest incident) and controls.png.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait


def main(url: str, token: str, out: Path, job: str = "") -> None:
    opts = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000"):
        opts.add_argument(arg)
    opts.binary_location = "/usr/bin/chromium"
    browser = webdriver.Chrome(options=opts, service=webdriver.ChromeService("/usr/bin/chromedriver"))
    wait = WebDriverWait(browser, 30)
    out.mkdir(parents=True, exist_ok=True)
    try:
        browser.get(url)
        wait.until(lambda b: not b.find_element(By.ID, "login").get_property("hidden"))
        browser.find_element(By.ID, "token").send_keys(token)
        browser.find_element(By.CSS_SELECTOR, "#login-form button").click()
        wait.until(lambda b: b.find_element(By.ID, "view").get_attribute("data-rendered"))
        job = job or browser.execute_async_script(
            "fetch('/api/jobs').then(r => r.json()).then(j => arguments[0](j[0].job))")
        newest = browser.execute_async_script(
            "fetch('/api/incidents?limit=1').then(r => r.json()).then(p => arguments[0](p.items[0].id))")
        for name, hash_ in (("fleet", "#fleet"), ("job", f"#jobs/{job}"), ("incidents", "#incidents"),
                            ("incident", f"#incidents/{newest}"), ("controls", "#controls")):
            browser.execute_script("location.hash = arguments[0]", hash_)
            view = hash_[1:].split("/")[0]
            wait.until(lambda b: b.find_element(By.ID, "view").get_attribute("data-view") == view)  # noqa: B023 (called now)
            time.sleep(1.0)
            browser.save_screenshot(str(out / f"console-{name}.png"))
    finally:
        browser.quit()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), *(sys.argv[4:5]))
