"""The operator console in real headless Chromium, with the real broker, `trainguard act` and `trainguard ui`.

One act (hw_fault incidents wait for approval; the breaker trips above 10%
of the job) and one console run for the whole module; the browser signs in
through the page's own form. Screenshots of each view are written to
out/test-artifacts/console/ (TRAINGUARD_TEST_ARTIFACTS overrides the folder).
Kept to a few page loads: CPU is scarce where these run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.e2e.act_kit import Tap
from trainguard.schemas.records import (
    ActionCommand,
    Anomaly,
    AuditEntry,
    CheckpointEvent,
    Incident,
    JobTopology,
    Record,
    TrainingStep,
)
from trainguard.schemas.topics import Topics

pytestmark = [pytest.mark.broker, pytest.mark.e2e]
JOB = "llm"
NODES = [f"n{i}" for i in range(8)]
OPERATOR, VIEWER = "op-" + uuid.uuid4().hex, "view-" + uuid.uuid4().hex
ARTIFACTS = Path(os.environ.get("TRAINGUARD_TEST_ARTIFACTS", "out/test-artifacts")) / "console"


def output_of(proc: subprocess.Popen[str], log: Path) -> str:
    """Stop a background process and return the tail of what it printed."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return log.read_text()[-4000:]


@dataclass
class Stack:
    url: str
    tap: Tap
    browser: webdriver.Chrome
    procs: list[subprocess.Popen[str]]

    def wait(self, cond: Callable[[webdriver.Chrome], object], timeout_s: float = 20.0) -> object:
        return WebDriverWait(self.browser, timeout_s, poll_frequency=0.2,
                             ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)).until(cond)

    def click(self, css: str, timeout_s: float = 20.0) -> None:
        """Click an element; live updates re-render the view, so retry on a stale reference."""
        def clicked(b: webdriver.Chrome) -> bool:
            b.find_element(By.CSS_SELECTOR, css).click()
            return True
        self.wait(clicked, timeout_s)

    def attr(self, css: str, name: str) -> str:
        return str(self.wait(lambda b: b.find_element(By.CSS_SELECTOR, css).get_attribute(name)))

    def show(self, hash_: str, view: str) -> None:
        self.browser.execute_script("location.hash = arguments[0]", hash_)
        self.wait(lambda b: b.find_element(By.ID, "view").get_attribute("data-view") == view)

    def shot(self, name: str) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.browser.save_screenshot(str(ARTIFACTS / f"{name}.png"))

    def login(self, token: str) -> None:
        b = self.browser
        b.get(self.url)
        self.wait(lambda b: not b.find_element(By.ID, "login").get_property("hidden")
                  or b.find_element(By.ID, "who").text)
        if b.find_element(By.ID, "who").text:
            self.click("#logout")
            self.wait(lambda b: not b.find_element(By.ID, "login").get_property("hidden"))
        b.find_element(By.ID, "token").send_keys(token)
        self.click("#login-form button")
        self.wait(lambda b: b.find_element(By.ID, "view").get_attribute("data-rendered"))


def chromium() -> webdriver.Chrome:
    opts = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000", "--disable-extensions"):
        opts.add_argument(arg)
    opts.binary_location = "/usr/bin/chromium"
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=opts, service=webdriver.ChromeService("/usr/bin/chromedriver"))


def start(args: list[str], env: dict[str, str], cwd: Path) -> tuple[subprocess.Popen[str], Path]:
    """A trainguard process writing to a log file (a pipe nobody reads would fill and block it)."""
    log = cwd / f"{args[0]}.log"
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "trainguard.cli", *args], env=env, cwd=cwd, text=True,
                                stdout=out, stderr=subprocess.STDOUT)
    return proc, log


def console_url(proc: subprocess.Popen[str], log: Path, timeout_s: float = 60.0) -> str:
    """The URL `trainguard ui` prints once it listens."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if "console at " in line:
                return line.split("console at ")[1].split()[0]
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"trainguard ui did not start: {output_of(proc, log)}")


@pytest.fixture(scope="module")
def stack(kafka: str, tmp_path_factory: pytest.TempPathFactory, keys: Any) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("console")
    keys.node(*NODES, "s1")  # act verifies each agent's results with its node key
    prefix = f"t{uuid.uuid4().hex[:10]}."
    env = {**os.environ, "TRAINGUARD_TOPICS__PREFIX": prefix, "TRAINGUARD_TOPICS__PARTITIONS": "2",
           "TRAINGUARD_ACTIONS__GROUP_ID": f"a-{prefix}", "PYTHONUNBUFFERED": "1",
           "TRAINGUARD_ACTIONS__APPROVAL_KINDS": '["hw_fault"]',
           "TRAINGUARD_ACTIONS__STATE_DIR": str(tmp / "act"), "TRAINGUARD_ACTIONS__BREAKER_MAX_FRACTION": "0.1",
           "TRAINGUARD_ACTIONS__COMMAND_TIMEOUT_S": "3", "TRAINGUARD_ACTIONS__COOLDOWN_S": "0",
           "TRAINGUARD_ACTIONS__STANDBY_NODES": '["s1"]', **keys.env()}  # act signs its commands
    (tmp / "users.yaml").write_text(json.dumps({"users": [{"name": "alice", "role": "operator", "token": OPERATOR},
                                                          {"name": "victor", "role": "viewer", "token": VIEWER}]}))
    act, act_log = start(["act", "--executor", "local", "--timeout", "600"], env, tmp)
    ui, ui_log = start(["ui", "--port", "0", "--credentials", str(tmp / "users.yaml"), "--timeout", "600"], env, tmp)
    url = console_url(ui, ui_log)
    tap = Tap(kafka, Topics(prefix), keys, names=("actions", "audit"))
    tap.publish(JobTopology(ts=time.time(), job=JOB, world_size=8, dp=8, rank_nodes=dict(enumerate(NODES))))
    t0 = time.time() - 60
    for step in range(1, 41):
        tap.publish(TrainingStep(ts=t0 + step, job=JOB, rank=0, node="n0", step=step, loss=4.0 / step ** 0.3,
                                 step_time_s=1.0, mfu=0.41 + 0.01 * (step % 3)))
        if step % 10 == 0:
            tap.publish(CheckpointEvent(ts=t0 + step, job=JOB, step=step, path=f"/ckpt/{step}"))
    browser = chromium()
    s = Stack(url, tap, browser, [act, ui])
    try:
        yield s
    finally:
        browser.quit()
        tap.close()
        for proc, log in ((ui, ui_log), (act, act_log)):
            out = output_of(proc, log)
            if os.environ.get("TRAINGUARD_TEST_VERBOSE"):
                print(out)


def incident(tap: Tap, nodes: list[str], xid: int) -> Incident:
    now = time.time()
    anomaly = Anomaly(ts=now, id=f"an-{uuid.uuid4().hex[:8]}", kind="hw_fault", detector="hw_fault", onset=now - 2,
                      job=JOB, nodes=nodes, evidence={"xid": xid, "gpu": 3})
    inc = Incident(ts=now, id=f"inc-{uuid.uuid4().hex[:8]}", kind="hw_fault", job=JOB, onset=now - 2,
                   detected_at=now, nodes=nodes, anomaly_ids=[anomaly.id], evidence={"xid": xid, "gpu": 3})
    tap.publish(anomaly)
    tap.publish(inc)
    return inc


def is_(cls: type[Record], **fields: object) -> Callable[[Record], bool]:
    return lambda r: isinstance(r, cls) and all(getattr(r, k) == v for k, v in fields.items())


def audited(event: str, **detail: object) -> Callable[[Record], bool]:
    return lambda r: (isinstance(r, AuditEntry) and r.event == event
                      and all(r.detail.get(k) == v for k, v in detail.items()))


def test_page_loads_without_console_errors_and_shows_fleet_and_job(stack: Stack) -> None:
    stack.login(OPERATOR)
    stack.wait(lambda b: b.find_element(By.ID, "who").text == "alice (operator)")
    stack.show("#fleet", "fleet")
    stack.wait(lambda b: b.find_element(By.CSS_SELECTOR, "#count-standby .n").text == "1", 30)  # act's pool
    assert stack.browser.find_element(By.CSS_SELECTOR, "#count-healthy .n").text == "8"
    stack.shot("fleet")
    stack.show(f"#jobs/{JOB}", "jobs")
    stack.wait(lambda b: len(b.find_elements(By.CSS_SELECTOR, ".uplot")) == 2)
    assert len(stack.browser.find_elements(By.CSS_SELECTOR, "#checkpoints tr")) == 1 + 4
    stack.shot("job")
    errors = [e for e in stack.browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []


def test_a_published_incident_appears_live_with_its_evidence(stack: Stack) -> None:
    stack.show("#incidents", "incidents")
    stack.browser.execute_script("window.__notReloaded = true")
    inc = incident(stack.tap, ["n1"], xid=79)
    row = (By.CSS_SELECTOR, f'#incidents-table tr[data-id="{inc.id}"]')
    stack.wait(lambda b: b.find_elements(*row), 10)
    assert stack.browser.execute_script("return window.__notReloaded") is True
    stack.click(f'#incidents-table tr[data-id="{inc.id}"] td')
    stack.wait(lambda b: "79" in b.find_element(By.ID, "evidence").text)
    stack.wait(lambda b: "hw_fault.evict_swap_restart" in b.find_element(By.ID, "decision").text)
    stack.wait(lambda b: "xid" in b.find_element(By.ID, "anomalies").text)
    stack.shot("incident")


def test_a_viewer_cannot_approve(stack: Stack) -> None:
    stack.login(VIEWER)
    stack.show("#controls", "controls")
    stack.wait(lambda b: b.find_elements(By.CSS_SELECTOR, "#approvals button.approve"))
    assert stack.wait(lambda b: not b.find_element(By.CSS_SELECTOR, "#approvals button.approve").is_enabled())
    decision = stack.attr("#approvals tr[data-decision]", "data-decision")
    answer = stack.browser.execute_async_script(  # what the button would send, sent anyway from the page
        "const done = arguments[1]; api(`/api/decisions/${arguments[0]}/approve`, {method: 'POST', body: '{}'})"
        ".then(() => done('sent'), (e) => done(e.message));", decision)
    assert "viewer" in answer
    stack.tap.drain(2)
    assert not [r for r in stack.tap.seen if audited("console_approve")(r)]
    stack.browser.get_log("browser")  # the refused request's 403 is expected here, not a page error


def test_an_approval_from_the_page_sends_the_command(stack: Stack) -> None:
    stack.login(OPERATOR)
    stack.show("#controls", "controls")
    stack.wait(lambda b: b.find_elements(By.CSS_SELECTOR, "#approvals button.approve"))
    stack.shot("controls-pending")
    decision = stack.attr("#approvals tr[data-decision]", "data-decision")
    stack.click(f'#approvals tr[data-decision="{decision}"] button.approve')
    stack.wait(lambda b: "approve: sent" in b.find_element(By.ID, "toasts").text)
    request = stack.tap.wait(audited("console_approve"), 20)
    assert isinstance(request, AuditEntry) and request.actor == "alice" and request.subject_id == decision
    applied = stack.tap.wait(audited("operator_approve", applied=True), 20)
    assert isinstance(applied, AuditEntry) and applied.actor == "alice"
    # the local executor carries out an eviction as a signed `stop` to the evicted node's agent
    command = stack.tap.wait(is_(ActionCommand, decision_id=decision), 30)
    assert isinstance(command, ActionCommand) and command.action == "stop" and command.nodes == ["n1"]
    assert command.expires > command.ts  # signed (Ed25519, in the headers) and expiring


def test_the_breaker_is_reset_from_the_page(stack: Stack) -> None:
    inc = incident(stack.tap, ["n2", "n3"], xid=48)  # 2 of 8 nodes > 10%: evicting them trips the breaker
    stack.show("#controls", "controls")
    stack.click(f'#approvals tr[data-incident="{inc.id}"] button.approve', 30)
    stack.wait(lambda b: "tripped" in b.find_element(By.ID, "breaker-state").text, 40)
    stack.shot("controls-breaker-tripped")
    stack.click("#reset-breaker")
    reset = stack.tap.wait(audited("operator_reset_breaker", applied=True), 20)
    assert isinstance(reset, AuditEntry) and reset.actor == "alice"
    stack.wait(lambda b: "closed" in b.find_element(By.ID, "breaker-state").text, 20)
    stack.shot("controls")
    errors = [e for e in stack.browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []


def test_a_kind_is_demoted_from_the_rollout_panel(stack: Stack) -> None:
    """The Rollout panel shows act's modes; a click sends a signed set_rollout that act applies and shows back."""
    stack.login(OPERATOR)
    stack.browser.get_log("browser")  # a request racing the login switch may be refused: not this test's page
    stack.show("#controls", "controls")
    button = '#rollout-kinds tr[data-kind="nan"] button[data-mode="observe"]'
    stack.wait(lambda b: b.find_elements(By.CSS_SELECTOR, button), 30)
    stack.wait(lambda b: b.find_element(By.CSS_SELECTOR, '#rollout-kinds tr[data-kind="nan"] td.mode').text
               == "auto (default)")
    stack.click(button)
    applied = stack.tap.wait(audited("operator_set_rollout", applied=True), 20)
    assert isinstance(applied, AuditEntry) and applied.actor == "alice" and applied.subject_id == "kind:nan"
    assert applied.detail["mode"] == "observe"
    stack.wait(lambda b: b.find_element(By.CSS_SELECTOR, '#rollout-kinds tr[data-kind="nan"] td.mode').text
               == "observe", 20)
    stack.shot("controls-rollout")
    errors = [e for e in stack.browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []


def test_a_lemon_node_is_shown_with_its_history_and_released_from_the_page(stack: Stack) -> None:
    """Three hw_fault incidents on n6 make act quarantine it (counted on decision, even one awaiting approval);
    the Controls page lists it with its three incidents; Release sends a signed release_node that act applies."""
    stack.login(OPERATOR)
    stack.browser.get_log("browser")
    incidents = [incident(stack.tap, ["n6"], xid=79) for _ in range(3)]
    quarantined = stack.tap.wait(lambda r: isinstance(r, AuditEntry) and r.event == "lemon_quarantined"
                                 and r.subject_id == "n6", 60)
    assert isinstance(quarantined, AuditEntry)
    assert [i["id"] for i in quarantined.detail["incidents"]] == [i.id for i in incidents]
    stack.show("#controls", "controls")
    row = '#lemons tr[data-node="n6"]'
    stack.wait(lambda b: b.find_elements(By.CSS_SELECTOR, row), 30)
    history = stack.browser.find_element(By.CSS_SELECTOR, f"{row} ul.lemon-history").text
    assert all(i.id in history for i in incidents) and "3 hw_fault incidents" in stack.browser.find_element(
        By.CSS_SELECTOR, row).text
    stack.shot("controls-lemons")
    stack.click(f"{row} button.release")
    released = stack.tap.wait(audited("operator_release_node", applied=True), 20)
    assert isinstance(released, AuditEntry) and released.actor == "alice" and released.subject_id == "n6"
    stack.wait(lambda b: not b.find_elements(By.CSS_SELECTOR, row), 20)  # act's next rails_state: no lemon


def test_an_incident_marked_false_on_its_page_moves_the_rules_precision(stack: Stack) -> None:
    """The Verdict panel sends a signed verdict; act applies it and Controls shows the rule's precision move."""
    stack.login(OPERATOR)
    stack.browser.get_log("browser")  # a request racing the login switch may be refused: not this test's page
    rule = "hw_fault.evict_swap_restart"
    cell = f'#rule-precision tr[data-rule="{rule}"] td.precision'
    for value, label, precision in (("true", "True fault", "100 %"), ("false", "False alarm", "50 %")):
        now = time.time()  # the worker puts the detector that opened an incident in its evidence
        inc = Incident(ts=now, id=f"inc-{uuid.uuid4().hex[:8]}", kind="hw_fault", job=JOB, onset=now - 2,
                       detected_at=now, nodes=["n5"], evidence={"xid": 79, "detector": "xid"})
        stack.tap.publish(inc)
        stack.tap.wait(audited("decision", incident=inc.id), 30)
        stack.show(f"#incidents/{inc.id}", "incidents")
        button = f'#verdict button[data-verdict="{value}"]'
        stack.wait(lambda b, css=button: b.find_elements(By.CSS_SELECTOR, css), 20)
        stack.browser.find_element(By.ID, "verdict-note").send_keys(f"{label} says the test")
        stack.click(button)
        applied = stack.tap.wait(audited("operator_verdict", applied=True, verdict=value), 20)
        assert isinstance(applied, AuditEntry) and applied.actor == "alice" and applied.subject_id == inc.id
        assert applied.detail["note"] == f"{label} says the test"
        stack.wait(lambda b, v=value: b.find_element(By.ID, "verdict-current").text.startswith(v), 20)
        stack.show("#controls", "controls")
        stack.wait(lambda b, p=precision: b.find_element(By.CSS_SELECTOR, cell).text.startswith(p), 30)
        stack.wait(lambda b, p=precision: b.find_element(
            By.CSS_SELECTOR, '#detector-precision tr[data-detector="xid"] td.precision').text == p, 10)
    row = f'#rule-precision tr[data-rule="{rule}"]'
    assert stack.browser.find_element(By.CSS_SELECTOR, row + " td.mode").text == "approve"  # its mode, beside it
    stack.shot("controls-precision")
    stack.show("#report/1h", "report")
    stack.wait(lambda b: b.find_element(By.CSS_SELECTOR, f'#report-table tr[data-rule="{rule}"] td.verdicts').text
               == "1/1/0", 20)
    assert stack.browser.find_element(By.CSS_SELECTOR, f'#report-table tr[data-rule="{rule}"] td.precision').text \
        == "50 %"
    stack.shot("report")
    errors = [e for e in stack.browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
