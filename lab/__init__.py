"""trainguard's lab: offline work, left out of the runtime image.

- `lab.telemetry_sim`: the telemetry simulator (`trainguard simulate`): a scenario YAML in, a recording of
  the events collectors would publish, with ground-truth labels, out.
- `lab.ettr_sim`: the ETTR simulator (`trainguard ettr-sim`): months of a big job's incidents priced under
  trainguard and a baseline; no events.
- `lab.backtest`: the detectors over a recording, offline, scored against labels (`trainguard backtest`).
- `lab.demo`: a real torch.distributed job surviving injected faults (`trainguard demo`).
- `lab.localkafka`: the local Apache Kafka broker for the demo and the tests (`trainguard broker`).

Lab may import any package; the runtime packages never import lab, and the CLI only inside the commands
above (tests/unit/test_layering.py). Install it with `pip install 'trainguard[lab]'`.
"""
