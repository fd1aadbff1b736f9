"""The on-node agent (ByteRobust's in-pod agent): supervise training, obey signed commands.

`trainguard run -- CMD` builds one with `Agent.from_settings`. It starts CMD, tees its output
and turns interesting lines into `LogEvent`s, publishes its exit code, and
carries out the process-level `ActionCommand`s addressed to its job (and
node, when the command names nodes):

* `restart_from_checkpoint` {step, path}: stop, restart with
  TRAINGUARD_RESUME_STEP/PATH set and TRAINGUARD_ATTEMPT incremented.
* `hot_update` / `rollback_code` {code_version}: restart in place with
  TRAINGUARD_CODE_VERSION set (no rescheduling), resume params if given.
* `dump_stacks` {repeat, interval_s}: publish `StackSample`s of every
  training process (periodically when repeat > 1, e.g. during a hang).
  The agent also does this on its own while the hook's progress files show
  a process stuck on one step (`HangWatch`).
* `stop`: stop the training process.
* `self_check`, `replay_regroup`: run the self-check command with the
  command's JSON; its stdout (a JSON object) becomes the result's details.

A command is carried out only if act's Ed25519 signature (detached, in the
message headers, over the exact bytes received) verifies with one of the
act public keys this agent holds, it has not expired, and its id was never
carried out. Anything else is audited: a forged command gets a "rejected"
result and its id is *not* remembered (a forger cannot burn the id of a
real command); an expired one only the audit entry (its sender gave up on
it); a replayed id a "skipped" result. Accepted ids are remembered in the
state file before execution. Every record the agent publishes is signed
with its own node key by its `Publisher`, so act can tell its results from
forgeries. No key ever reaches the training process's environment.

Each start of the training process is an attempt with its own key: the agent
mints an Ed25519 pair, writes the private half to a fresh file (mode 0600, in
a 0700 directory of its state dir) whose *path* it passes as
TRAINGUARD_ATTEMPT_KEY_FILE (and its id as TRAINGUARD_ATTEMPT_KEY_ID), and
announces the public half in an `AttemptKey` signed with its node key. The
hook signs the job's checkpoint and topology records with it, and act believes
those only when signed by a key of the job's current attempt
(`actions.attempt_keys`). The previous attempt's key file is deleted at each
start and when the agent closes: the key dies with its attempt.
"""

from __future__ import annotations

import json
import logging
import secrets
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import msgspec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from trainguard.collectors.agent.error_file import COMMANDED, SILENT_STARTUP, Attempt
from trainguard.collectors.agent.hang_watch import HangWatch, progress_rank, read_progress
from trainguard.collectors.agent.state import AgentState, StateFile
from trainguard.collectors.agent.supervisor import ProcessSupervisor, env_of
from trainguard.collectors.logs import LogParser
from trainguard.collectors.settings import AgentConfig
from trainguard.collectors.sink import RecordSink
from trainguard.collectors.stacks import StackSampler
from trainguard.schemas.action_params import DumpStacks, Restart
from trainguard.schemas.actions import AGENT_VERBS
from trainguard.schemas.records import ActionCommand, ActionResult, AttemptKey, AuditEntry, LogEvent, StackSample
from trainguard.schemas.signing import KeyRing, Received, attempt_key_id, command_problem, public_b64, write_private_key

log = logging.getLogger(__name__)



class CommandFeed(Protocol):
    """Where commands come from (`collectors.agent.command_feed.KafkaCommandFeed`)."""

    def poll(self, timeout_s: float) -> list[Received]: ...

    def commit(self) -> None: ...


class Agent:
    """Supervises one training command and executes the commands addressed to it."""

    def __init__(self, *, job: str, node: str, argv: Sequence[str], sink: RecordSink, command_keys: KeyRing,
                 state_dir: Path, max_clock_skew_s: float = 30.0,
                 grace_s: float = 30.0, selfcheck_command: Sequence[str] = ("trainguard", "selfcheck"),
                 selfcheck_timeout_s: float = 600.0, stack_timeout_s: float = 5.0,
                 hang_suspect_s: float = 300.0, hang_stack_every_s: float = 60.0,
                 tee: Callable[[str, str], None] = lambda line, stream: print(line),
                 clock: Callable[[], float] = time.time,
                 env: dict[str, str] | None = None) -> None:
        self.job, self.node = job, node
        self.sink = sink
        self.grace_s = grace_s
        self.selfcheck_command = list(selfcheck_command)
        self.selfcheck_timeout_s = selfcheck_timeout_s
        self._keys = command_keys
        self.max_clock_skew_s = max_clock_skew_s
        self._clock = clock
        self._tee = tee
        self._state_file = StateFile(state_dir / f"{job}-{node}.json")
        self.state: AgentState = self._state_file.load(now=clock(), env=env)
        self._state_file.save(self.state)
        self.stack_dir = state_dir / "stacks"
        self.progress_dir = state_dir / "progress" / f"{job}-{node}"
        self._hang = HangWatch(suspect_after_s=hang_suspect_s, sample_every_s=hang_stack_every_s) \
            if hang_suspect_s > 0 else None
        self._stacks = StackSampler(stack_dir=self.stack_dir, timeout_s=stack_timeout_s)
        self._parser = LogParser(node=node, source="training", job=job)
        self._parser_lock = threading.Lock()
        self._sampling = threading.Lock()
        self.proc = ProcessSupervisor(argv=argv, on_line=self._on_line)
        self.error_dir = state_dir / "errors"
        self.key_dir = state_dir / "attempt-keys" / f"{job}-{node}"
        self._env = env
        self.attempt: Attempt | None = None
        self.exit_code: int | None = None
        self.stopped_by_command = False
        self._commanding = ""  # the command stopping the child now: its exit event says so
        self.feed: CommandFeed | None = None  # the feed `from_settings` built (serve's default)
        self._closers: list[Callable[[], object]] = []

    @classmethod
    def from_settings(cls, settings: AgentConfig, *, job: str, node: str, argv: Sequence[str],
                      tee: Callable[[str, str], None], env: dict[str, str] | None = None) -> Agent:
        """The agent `trainguard run` starts, with its Kafka edges; `close()` releases them.

        Its sink is a spooling `Publisher` signing with this node's key (the training
        runs even while Kafka is down); its feed reads the actions topic in its own
        consumer group. No default key: without this node's key and act's public keys
        this raises (`trainguard run` stops with one line, exit code 2).
        """
        from trainguard.collectors.agent.command_feed import BackgroundFeed, KafkaCommandFeed
        from trainguard.collectors.publisher import Publisher
        from trainguard.schemas.kafka_config import client_options
        from trainguard.schemas.topics import Topics

        cs, agent_cfg = settings.collectors, settings.collectors.agent
        signer = settings.security.signer("node", node=node)
        command_keys = settings.security.required_ring("act")
        kafka = client_options(settings.broker, "kafka-python")
        topics = Topics(settings.topics.prefix)
        publisher = Publisher(servers=settings.broker.servers, topics=topics,
                              spool_dir=cs.spool_dir / f"agent-{job}-{node}",
                              spool_max_bytes=int(cs.spool_max_mb * 1024 * 1024), client_id=f"trainguard-agent-{node}",
                              sync=cs.spool_sync, signer=signer, client_options=kafka)
        feed = BackgroundFeed(KafkaCommandFeed(servers=settings.broker.servers, topic=topics.name("actions"),
                                               group_id=f"trainguard-agent-{job}-{node}", client_options=kafka))
        agent = cls(job=job, node=node, argv=argv, sink=publisher,
                    command_keys=command_keys, max_clock_skew_s=settings.security.max_clock_skew_s,
                    state_dir=agent_cfg.state_dir, grace_s=agent_cfg.grace_s,
                    selfcheck_command=agent_cfg.selfcheck_command, selfcheck_timeout_s=agent_cfg.selfcheck_timeout_s,
                    stack_timeout_s=agent_cfg.stack_timeout_s, hang_suspect_s=agent_cfg.hang_suspect_s,
                    hang_stack_every_s=agent_cfg.hang_stack_every_s, tee=tee,
                    env=env)
        agent.feed = feed
        agent._closers = [feed.close, lambda: publisher.close(timeout_s=10)]
        return agent

    def close(self) -> None:
        """Release what `from_settings` built: the command feed, then the publisher (it flushes its spool)."""
        for close in self._closers:
            close()
        self._closers = []
        self._forget_attempt_keys()

    # ------------------------------------------------------------ process

    def start(self) -> int:
        """Start (or restart) the training command with the current state's environment."""
        self.exit_code = None
        self.stopped_by_command = False
        self._commanding = ""
        self.attempt = Attempt(directory=self.error_dir, name=f"{self.job}-{self.node}", attempt=self.state.attempt,
                               resume_step=self.state.resume_step, env=self._env)
        for stale in self.progress_dir.glob("*.json"):
            stale.unlink(missing_ok=True)  # the previous attempt's processes: gone
        env = {**self.state.child_env(), "TRAINGUARD_STACK_DIR": str(self.stack_dir),
               "TRAINGUARD_PROGRESS_DIR": str(self.progress_dir), **self.attempt.env(), **self._mint_attempt_key()}
        pid = self.proc.start(env)
        log.info("started %s (pid %d, attempt %d)", " ".join(self.proc.argv), pid, self.state.attempt)
        return pid

    def _mint_attempt_key(self) -> dict[str, str]:
        """A fresh key for this start of the training process: file for it, announcement for act.

        Announced before the process starts, so its first records rarely overtake it (act holds
        those that do until it arrives). The previous start's key file is deleted first.
        """
        self._forget_attempt_keys()
        self.key_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.key_dir.chmod(0o700)  # an existing directory keeps its mode: make sure
        nonce = secrets.token_hex(8)
        kid = attempt_key_id(self.job, self.state.attempt, self.node, nonce)
        path = self.key_dir / f"{self.state.attempt}-{nonce}.key"
        key = Ed25519PrivateKey.generate()
        write_private_key(path, key)
        self.sink.publish(AttemptKey(ts=self._clock(), job=self.job, attempt=self.state.attempt, node=self.node,
                                     key_id=kid, public_key=public_b64(key.public_key())))
        return {"TRAINGUARD_ATTEMPT_KEY_FILE": str(path), "TRAINGUARD_ATTEMPT_KEY_ID": kid}

    def _forget_attempt_keys(self) -> None:
        for old in self.key_dir.glob("*.key"):
            old.unlink(missing_ok=True)

    def check_exit(self) -> int | None:
        """The exit code once the child has exited; publishes it once as a LogEvent."""
        if self.exit_code is not None:
            return self.exit_code
        code = self.proc.poll()
        if code is not None:
            self.exit_code = code
            with self._parser_lock:  # the output is drained: a traceback's message is complete
                pending = self._parser.flush()
            for event in pending:
                self._publish_output(event)
            self.sink.publish(self._versioned(self._exit_event(code)))
        return code

    def _exit_event(self, code: int) -> LogEvent:
        """The exit, preceded (non-zero) by what `@record` wrote; a silent death before any step says so."""
        event = self._parser.exit_event(code, self._clock())
        attempt = self.attempt
        if code != 0 and self._commanding:
            return msgspec.structs.replace(event, message=f"{event.message} ({COMMANDED} {self._commanding})")
        if code == 0 or attempt is None:
            return event
        why = attempt.error_event(node=self.node, job=self.job, ts=event.ts)
        if why is not None:
            self.sink.publish(self._versioned(why))
        elif not attempt.said_why and not attempt.reached_a_step(self.progress_dir):
            event = msgspec.structs.replace(event, message=f"{event.message} {SILENT_STARTUP}")
        return event

    def _publish_output(self, event: LogEvent) -> None:
        if self.attempt is not None:
            self.attempt.heard(event)
        self.sink.publish(self._versioned(event))

    def _on_line(self, line: str, stream: str) -> None:
        self._tee(line, stream)  # stream is 'stdout' or 'stderr'
        with self._parser_lock:  # stdout and stderr pumps share the traceback state
            events = self._parser.feed(line, self._clock())
        for event in events:
            self._publish_output(event)

    def _versioned(self, event: LogEvent) -> LogEvent:
        """Stamp the code version this agent launched: it tells a bad hot update from the machine."""
        version = self.state.code_version
        return msgspec.structs.replace(event, code_version=version) if version else event

    def serve(self, feed: CommandFeed | None = None, *, linger_s: float, stop: threading.Event) -> int:
        """Start the child and obey commands from `feed` (default: the one `from_settings` built) until it is
        done; returns the agent's exit code.

        A child that exits 0 ends the agent at once (training finished). After a
        failure or a `stop` command the agent lingers `linger_s` for a restart
        command, then exits with the child's code (0 after a commanded stop).
        """
        feed = feed or self.feed
        if feed is None:
            raise ValueError("serve needs a command feed (none given, and the agent was not built from settings)")
        self.start()
        linger_until: float | None = None
        while not stop.is_set():
            for cmd in feed.poll(0.5):
                self.handle(cmd)
            feed.commit()
            self.watch_hang()
            code = self.check_exit()
            if code is None:
                linger_until = None
                continue
            if code == 0 and not self.stopped_by_command:
                return 0
            linger_until = linger_until or time.monotonic() + linger_s
            if time.monotonic() >= linger_until:
                return 0 if self.stopped_by_command else (code if code > 0 else 128 - code)
        self.proc.stop(grace_s=self.grace_s)
        self.check_exit()
        return 143

    def watch_hang(self) -> None:
        """Sample stacks periodically while a training process is stuck on one step."""
        if self._hang is None or self.proc.pid is None:
            return
        alive = set(self.proc.process_tree())
        now = time.monotonic()
        for pid, (step, phase) in read_progress(self.progress_dir).items():
            if pid not in alive:
                continue
            stalled = self._hang.due(pid, step=step, phase=phase, now=now)
            if stalled is not None:
                log.warning("pid %d stuck at step %d for %.0fs: sampling stacks", pid, step, stalled)
                self.sample_stacks(f"suspected hang: step {step} unchanged for {stalled:.0f}s", pids=[pid])
        self._hang.forget_except(alive)

    # ----------------------------------------------------------- commands

    def addressed(self, cmd: ActionCommand) -> bool:
        """Is this a process-level command for this job (and node, if it names nodes)?"""
        return (cmd.action in AGENT_VERBS and cmd.job == self.job
                and (not cmd.nodes or self.node in cmd.nodes))

    def handle(self, received: Received) -> ActionResult | None:
        """Verify, de-duplicate and execute one command; None if it is not for this agent (or expired)."""
        cmd = received.command
        if not self.addressed(cmd):
            return None
        # Logged before anything can go wrong, so a command that "got no answer" can be told apart
        # from one that never arrived (the demo's rare unanswered restart needed exactly this).
        log.info("command %s %s received (job %s, nodes %s)", cmd.id, cmd.action, cmd.job, cmd.nodes or "all")
        kid, problem = self._keys.check(received.payload, received.headers)
        if problem:
            log.warning("command %s rejected: %s", cmd.id, problem)
            self._audit("command_rejected", cmd, {"reason": problem, "key_id": kid})
            return self._result(cmd, "rejected", f"not signed by act: {problem}")
        problem = command_problem(cmd, now=self._clock(), seen=self.state.executed, max_skew_s=self.max_clock_skew_s)
        if problem:
            log.warning("command %s rejected: %s", cmd.id, problem)
            self._audit("command_rejected", cmd, {"reason": problem, "key_id": kid})
            if cmd.id in self.state.executed:
                # A replay changes nothing, but act re-sends a journaled command after a restart and
                # must learn that it was carried out (it records the step as done, with its effects).
                previous = self.state.executed[cmd.id]
                return self._result(cmd, "skipped", f"already executed (status {previous})",
                                    {"already_executed": True, "previous_status": previous})
            return None
        self.state.executed[cmd.id] = "started"
        self._state_file.save(self.state)
        try:
            status, message, details = self._execute(cmd)
        except Exception as exc:  # a failing action is reported, never crashes the agent
            status, message, details = "failed", f"{type(exc).__name__}: {exc}", {}
        self.state.executed[cmd.id] = status
        self._state_file.save(self.state)
        log.info("command %s %s: %s %s", cmd.id, cmd.action, status, message)
        self._audit("command_executed", cmd, {"status": status, "message": message})
        return self._result(cmd, status, message, details)

    def _execute(self, cmd: ActionCommand) -> tuple[str, str, dict[str, Any]]:
        """Carry out a command by its typed parameters (the decoder matched them to the action)."""
        p = cmd.params
        if isinstance(p, Restart):
            if cmd.action in ("hot_update", "rollback_code"):
                if not p.code_version:
                    return "failed", "params.code_version is required (a non-empty string)", {}
                self.state.code_version = p.code_version
            return self._restart(step=p.step, path=p.path, attempt=p.attempt)
        if isinstance(p, DumpStacks):
            reason = p.reason or f"dump_stacks {cmd.id}"
            return self._dump_stacks(repeat=p.repeat, interval_s=p.interval_s, reason=reason)
        if cmd.action == "stop":
            self._commanding = "stop"
            code = self.proc.stop(grace_s=self.grace_s)
            self.stopped_by_command = True
            self.check_exit()
            return "ok", f"training process stopped (exit code {code})", {"exit_code": code}
        return self._selfcheck(cmd)

    def _restart(self, *, step: int | None, path: str | None, attempt: int | None) -> tuple[str, str, dict[str, Any]]:
        self._commanding = "restart"
        old = self.proc.stop(grace_s=self.grace_s)
        self.check_exit()
        # The job's restart generation when the command carries one (every node of the job, a
        # standby included, then reports the same `attempt`); else this agent's own count.
        self.state.attempt = max(self.state.attempt + 1, attempt or 0)
        self.state.resume_step = step
        self.state.resume_path = str(path) if path else None
        self._state_file.save(self.state)
        pid = self.start()
        details = {"pid": pid, "previous_exit_code": old, **self.state.child_env()}
        return "ok", f"restarted as attempt {self.state.attempt}", details

    def _dump_stacks(self, *, repeat: int, interval_s: float, reason: str) -> tuple[str, str, dict[str, Any]]:
        samples = self.sample_stacks(reason)
        if repeat > 1:
            threading.Thread(target=self._repeat_stacks, args=(repeat - 1, interval_s, reason), daemon=True).start()
        if not samples:
            return "failed", "no stacks captured (no py-spy, and no process with the hook's SIGUSR1 handler)", {}
        return "ok", f"published {len(samples)} stack samples", {"pids": sorted({s.pid for s in samples})}

    def _repeat_stacks(self, times: int, interval_s: float, reason: str) -> None:
        for i in range(times):
            time.sleep(interval_s)
            if self.proc.pid is None:
                return
            self.sample_stacks(f"{reason} (periodic {i + 2})")

    def sample_stacks(self, reason: str, pids: list[int] | None = None) -> list[StackSample]:
        """One `StackSample` per thread of every training process (or `pids`); published and returned."""
        with self._sampling:  # one dump at a time: concurrent dumps would interleave in the stack file
            return self._sample_stacks(reason, pids)

    def _sample_stacks(self, reason: str, pids: list[int] | None) -> list[StackSample]:
        out: list[StackSample] = []
        for pid in self.proc.process_tree() if pids is None else pids:
            rank = progress_rank(self.progress_dir, pid)  # the hook knows best (a rendezvous may assign it)
            if rank is None:
                env_rank = env_of(pid, "RANK")
                rank = int(env_rank) if env_rank and env_rank.isdigit() else 0
            for stack in self._stacks.sample(pid):
                sample = StackSample(ts=self._clock(), job=self.job, node=self.node, pid=pid, frames=stack.frames,
                                     rank=rank,
                                     reason=f"{reason}; thread {stack.thread}")
                self.sink.publish(sample)
                out.append(sample)
        return out

    def _selfcheck(self, cmd: ActionCommand) -> tuple[str, str, dict[str, Any]]:
        argv = [*self.selfcheck_command, "--command-json", msgspec.json.encode(cmd).decode()]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self.selfcheck_timeout_s)
        except FileNotFoundError:
            return "failed", f"self-check command not found: {argv[0]}", {}
        except subprocess.TimeoutExpired:
            return "failed", f"self-check timed out after {self.selfcheck_timeout_s}s", {}
        try:
            details = json.loads(done.stdout)
            if not isinstance(details, dict):
                details = {"output": details}
        except ValueError:
            details = {"stdout": done.stdout[-4000:]}
        if done.returncode != 0:
            details.setdefault("stderr", done.stderr[-4000:])
            return "failed", f"self-check exited with code {done.returncode}", details
        return "ok", "self-check passed", details

    def _result(self, cmd: ActionCommand, status: str, message: str,
                details: dict[str, Any] | None = None) -> ActionResult:
        result = ActionResult(ts=self._clock(), command_id=cmd.id, action=cmd.action,
                              status=status, message=message,  # type: ignore[arg-type]
                              job=self.job, node=self.node, details=details or {})
        self.sink.publish(result)
        return result

    def _audit(self, event: str, cmd: ActionCommand, detail: dict[str, Any]) -> None:
        self.sink.publish(AuditEntry(ts=self._clock(), event=event, subject_id=cmd.id, actor=f"agent:{self.node}",
                                     detail={"action": cmd.action, "job": cmd.job, "nodes": cmd.nodes, **detail}))
