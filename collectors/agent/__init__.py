"""The on-node agent (`trainguard run`) and everything it runs on its node.

`node_agent.Agent` supervises the training command (`supervisor`), keeps its
executed command ids (`state`), reads signed commands (`command_feed`),
watches for hangs (`hang_watch`) and runs the stop-time self-check programs
in `selfcheck/`. Like the rest of `collectors`, it imports only `schemas`
and `collectors`.
"""
