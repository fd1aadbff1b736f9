"""Prometheus metrics of the action consumer: decisions, actions, rails.

Kept out of `actions/` so the pure core stays free of exporters. Everything
lives in a registry owned by the instance (never the global default), and
the HTTP endpoint starts only when a port is given.

>>> m = ActionMetrics()
>>> m.decided(kind="nan", rule="nan.restore_checkpoint", status="planned")
>>> m.value("trainguard_decisions_total", kind="nan", rule="nan.restore_checkpoint", status="planned")
1.0
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from trainguard.actions.rollout import MODES


class ActionMetrics:
    """Counters and gauges of `trainguard act`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self._decisions = Counter("trainguard_decisions_total", "Decisions taken", ["kind", "rule", "status"],
                                  registry=self.registry)
        self._actions = Counter("trainguard_actions_total", "Plan steps carried out", ["action", "status"],
                                registry=self.registry)
        self._breaker = Gauge("trainguard_breaker_tripped", "1 while the eviction circuit breaker holds",
                              registry=self.registry)
        self._pool = Gauge("trainguard_standby_pool_size", "Warm standby nodes ready", registry=self.registry)
        self._exhausted = Gauge("trainguard_standby_pool_exhausted", "1 when no spare is left",
                                registry=self.registry)
        self._ettr = Gauge("trainguard_job_ettr", "Effective training time ratio (productive / wall-clock)",
                           ["training_job"], registry=self.registry)
        self._evicted = Gauge("trainguard_act_bounded_evictions", "Keys dropped by bounded per-job maps, by owner",
                              ["owner"], registry=self.registry)
        self._unproductive = Gauge("trainguard_job_unproductive_seconds",
                                   "Unproductive time by cause: detection, localisation, failover, recompute",
                                   ["training_job", "category"], registry=self.registry)
        self._rollout = Gauge("trainguard_rollout_mode", "1 for the rollout mode (observe, approve, auto) in force "
                              "per incident kind, and per rule where a rule overrides its kind",
                              ["kind", "rule", "mode"], registry=self.registry)
        self._unverified = Gauge("trainguard_act_incidents_unverified",
                                 "1 while incidents are trusted by Kafka ACLs alone (incidents_trusted_by_acl)",
                                 registry=self.registry)
        self._records_unverified = Gauge("trainguard_act_job_records_unverified",
                                         "1 while checkpoint and topology records are trusted by Kafka ACLs alone "
                                         "(security.job_records_trusted_by_acl)", registry=self.registry)
        self._lemons = Gauge("trainguard_lemon_nodes", "Nodes quarantined as lemons (repeated incidents or failed "
                             "self-checks), held out of the standby pool until an operator releases them",
                             registry=self.registry)

        self._rule_precision = Gauge("trainguard_rule_precision", "Operators' verdicts: true / (true + false) per "
                                     "rule over actions.rollout.precision_window_s (unsure excluded; absent "
                                     "without a true or false verdict)", ["rule"], registry=self.registry)
        self._detector_precision = Gauge("trainguard_detector_precision", "As trainguard_rule_precision, per "
                                         "detector", ["detector"], registry=self.registry)
        self._verdicts = Gauge("trainguard_rule_verdicts", "Operators' verdicts per rule in the window",
                               ["rule", "verdict"], registry=self.registry)
        self._low = Gauge("trainguard_rule_precision_low", "1 while a rule in auto has a precision below "
                          "actions.rollout.precision_floor on enough verdicts", ["rule"], registry=self.registry)
        self._shown: dict[int, set[tuple[str, ...]]] = {}  # id(gauge) -> label values set last time

    def lemons(self, count: int) -> None:
        """Nodes quarantined as lemons now (only an operator's release_node brings one back)."""
        self._lemons.set(count)

    def precision(self, shown: Mapping[str, Mapping[str, Mapping[str, object]]], low: Sequence[str]) -> None:
        """Per-rule and per-detector precision, verdict counts, and the rules in auto below the floor;
        a rule or detector that left the window is removed (an old figure must not stand as a current one)."""
        rules, detectors = shown.get("rules", {}), shown.get("detectors", {})
        self._replace(self._rule_precision, {(r,): row["precision"] for r, row in rules.items()})
        self._replace(self._detector_precision, {(d,): row["precision"] for d, row in detectors.items()})
        self._replace(self._verdicts, {(r, v): row[v] for r, row in rules.items() for v in ("true", "false", "unsure")})
        self._replace(self._low, {(r,): 1.0 if r in low else 0.0 for r in rules})

    def _replace(self, gauge: Gauge, values: Mapping[tuple[str, ...], object]) -> None:
        kept = {k: float(v) for k, v in values.items() if isinstance(v, (int, float))}
        for labels in self._shown.get(id(gauge), set()) - set(kept):
            gauge.remove(*labels)
        for labels, value in kept.items():
            gauge.labels(*labels).set(value)
        self._shown[id(gauge)] = set(kept)

    def job_records_trusted_by_acl(self, unverified: bool) -> None:
        """1 while act uses checkpoint and topology records without an attempt key's signature."""
        self._records_unverified.set(1 if unverified else 0)

    def rollout(self, kinds: Mapping[str, str], rules: Mapping[str, str]) -> None:
        """1 for each kind's (and each overridden rule's) current mode, 0 for its other modes, so
        `trainguard_rollout_mode{mode="auto"} == 1` lists what act may do on its own."""
        for labels, mode in [*(({"kind": k, "rule": ""}, m) for k, m in kinds.items()),
                             *(({"kind": "", "rule": r}, m) for r, m in rules.items())]:
            for option in MODES:
                self._rollout.labels(mode=option, **labels).set(1.0 if option == mode else 0.0)

    def incidents_trusted_by_acl(self, unverified: bool) -> None:
        """1 while act acts on incidents without checking the worker's signature (act has no /readyz:
        its readiness probe reads /metrics, so the setting shows there)."""
        self._unverified.set(1 if unverified else 0)

    def evictions(self, counts: dict[str, int]) -> None:
        """Keys forgotten by act's bounded per-job maps, by owner (a bound that bites shows here)."""
        for owner, count in counts.items():
            self._evicted.labels(owner=owner).set(count)

    def ettr(self, *, job: str, ettr: float, unproductive_s: dict[str, float]) -> None:
        """A job's effective training time ratio and its unproductive time by cause."""
        self._ettr.labels(training_job=job).set(ettr)
        for category, seconds in unproductive_s.items():
            self._unproductive.labels(training_job=job, category=category).set(seconds)

    def decided(self, *, kind: str, rule: str, status: str) -> None:
        """Count one decision."""
        self._decisions.labels(kind=kind, rule=rule, status=status).inc()

    def acted(self, *, action: str, status: str) -> None:
        """Count one executed plan step."""
        self._actions.labels(action=action, status=status).inc()

    def rails(self, *, breaker_tripped: bool, pool_size: int) -> None:
        """Update the breaker and pool gauges."""
        self._breaker.set(1.0 if breaker_tripped else 0.0)
        self._pool.set(pool_size)
        self._exhausted.set(1.0 if pool_size == 0 else 0.0)

    def serve(self, port: int) -> None:
        """Expose the registry over HTTP on `port`."""
        start_http_server(port, registry=self.registry)

    def value(self, name: str, **labels: str) -> float | None:
        """One sample's value (for tests and `selfcheck`-style reports)."""
        return self.registry.get_sample_value(name, labels)
