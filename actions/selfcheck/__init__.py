"""Stop-time self-check, act's side: the fan-out of one check over the machines' agents.

The torch programs each machine runs are `collectors.agent.selfcheck`; the
verdict both sides apply is `schemas.selfcheck`.
"""
