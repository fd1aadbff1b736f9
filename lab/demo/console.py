"""How the demo talks to the terminal: one readable block per fault."""

from __future__ import annotations

import time

from rich.console import Console

from trainguard.lab.demo.scenario import FaultStep
from trainguard.schemas.records import ActionResult, Decision, Incident, TrainingStep


class ConsoleReporter:
    """Prints the demo's story with rich."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console()
        self.t0 = time.time()

    def _t(self) -> str:
        return f"[dim]{time.time() - self.t0:6.1f}s[/]"

    def phase(self, text: str) -> None:
        self.console.print(f"{self._t()} [bold]{text}[/]")

    def inject(self, step: FaultStep) -> None:
        where = f" on {step.node}" if step.node else ""
        self.console.rule(f"[bold red]fault: {step.title}[/]")
        self.console.print(f"{self._t()} [red]injected[/] {step.kind}{where}")

    def missed(self, step: FaultStep) -> None:
        self.console.print(f"{self._t()} [bold red]NOT DETECTED[/]: {step.title}")

    def incident(self, incident: Incident, latency_s: float) -> None:
        scope = ", ".join(filter(None, [
            f"nodes {incident.nodes}" if incident.nodes else "",
            f"ranks {incident.ranks}" if incident.ranks else "",
            f"group {incident.group}" if incident.group else "",
            f"step {incident.step}" if incident.step is not None else "",
        ]))
        self.console.print(f"{self._t()} [yellow]incident[/] [bold]{incident.kind}[/] ({scope}) "
                           f"detected in [bold]{latency_s:.1f}s[/]")

    def decision(self, decision: Decision) -> None:
        plan = " → ".join(p.action + (f"({', '.join(p.nodes)})" if p.nodes else "") for p in decision.plan)
        self.console.print(f"{self._t()} [cyan]decision[/] {decision.rule}: {decision.reason}")
        self.console.print(f"         plan: {plan}")

    def actions(self, results: list[ActionResult]) -> None:
        for r in sorted(results, key=lambda r: r.ts):
            colour = {"ok": "green", "failed": "red", "rejected": "red"}.get(r.status, "yellow")
            where = f" on {r.node}" if r.node else ""
            self.console.print(f"         action {r.action}{where}: [{colour}]{r.status}[/] {r.message}")

    def resumed(self, step: TrainingStep, downtime_s: float) -> None:
        self.console.print(f"{self._t()} [green]resumed[/] from checkpoint step {step.step - 1} "
                           f"(attempt {step.attempt}, code {step.code_version or '?'}); "
                           f"fault to first new step: {downtime_s:.1f}s")

    def restored(self, tiers: dict[int, str], onset_step: int | None) -> None:
        if tiers:
            where = ", ".join(f"rank {r}: {t}" for r, t in sorted(tiers.items()))
            self.console.print(f"         restored from ({where}); last step before the fault: {onset_step}")

    def not_recovered(self, step: FaultStep) -> None:
        self.console.print(f"{self._t()} [bold red]training did not resume[/] after: {step.title}")
