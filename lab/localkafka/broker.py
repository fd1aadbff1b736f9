"""Run a real single-node Apache Kafka (KRaft) broker on this machine.

The jars come from Maven Central through the committed `pom.xml` beside this
file and are cached in `lib_dir`; the broker runs as a detached Java process
whose pid is kept in the data directory's parent, so `start`, `status` and
`stop` work across separate CLI invocations.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from trainguard.settings import BrokerSettings


class BrokerError(RuntimeError):
    """The local broker could not be set up, started or stopped."""


@dataclass(frozen=True)
class BrokerPaths:
    """Where the local broker keeps its jars, data, config, logs and pid."""

    lib_dir: Path
    data_dir: Path

    @property
    def home(self) -> Path:
        return self.data_dir.parent

    @property
    def pid_file(self) -> Path:
        return self.home / "broker.pid"

    @property
    def config_file(self) -> Path:
        return self.home / "server.properties"

    @property
    def log_file(self) -> Path:
        return self.home / "broker.log"

    @property
    def log4j_file(self) -> Path:
        return self.home / "log4j2.properties"


class LocalBroker:
    """Start, stop and inspect the local broker described by `BrokerSettings`."""

    def __init__(self, settings: BrokerSettings, lib_dir: Path | None = None) -> None:
        self.settings = settings
        self.paths = BrokerPaths(
            lib_dir=(lib_dir or settings.data_dir.parent / "kafka-lib").resolve(),
            data_dir=settings.data_dir.resolve(),
        )

    # ----------------------------------------------------------- lifecycle

    def start(self, *, fresh: bool = False) -> int:
        """Start the broker (formatting storage first if needed); return its pid."""
        pid = self.pid()
        if pid is not None:
            return pid
        if _port_open(self.settings.host, self.settings.port):
            raise BrokerError(f"port {self.settings.port} is already in use by another process")
        self.ensure_jars()
        if fresh and self.paths.data_dir.exists():
            shutil.rmtree(self.paths.data_dir)
        self.paths.data_dir.mkdir(parents=True, exist_ok=True)
        self._write_config()
        if not (self.paths.data_dir / "meta.properties").exists():
            self._format()
        with open(self.paths.log_file, "ab") as log:
            proc = subprocess.Popen(
                self._java("kafka.Kafka", str(self.paths.config_file), heap=True),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.paths.pid_file.write_text(str(proc.pid))
        self._wait_ready(proc)
        return proc.pid

    def stop(self, timeout_s: float = 30.0) -> bool:
        """Stop the broker cleanly (SIGTERM, then SIGKILL). False if not running."""
        pid = self.pid()
        if pid is None:
            return False
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.2)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
        self.paths.pid_file.unlink(missing_ok=True)
        return True

    def pid(self) -> int | None:
        """The pid of the running broker, or None."""
        try:
            pid = int(self.paths.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        if _alive(pid):
            return pid
        self.paths.pid_file.unlink(missing_ok=True)
        return None

    def topics(self, timeout_s: float = 10.0) -> list[str]:
        """List topics through a kafka-python admin client (proves it answers)."""
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(
            bootstrap_servers=self.settings.servers, request_timeout_ms=int(timeout_s * 1000)
        )
        try:
            return sorted(admin.list_topics())
        finally:
            admin.close()

    # ----------------------------------------------------------- set-up

    def ensure_jars(self) -> None:
        """Resolve the broker jars from Maven Central once (cached)."""
        lib = self.paths.lib_dir
        if lib.is_dir() and any(lib.glob("kafka_2.13-*.jar")):
            return
        mvn = shutil.which("mvn")
        if mvn is None:
            raise BrokerError("Maven ('mvn') is needed once to fetch the Kafka jars; "
                              "install it (apt-get install maven)")
        pom = Path(str(files("trainguard.lab.localkafka").joinpath("pom.xml")))
        lib.mkdir(parents=True, exist_ok=True)
        cmd = [mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
               f"-DoutputDirectory={lib}", "-DincludeScope=runtime"]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            shutil.rmtree(lib, ignore_errors=True)
            raise BrokerError(f"mvn could not fetch the Kafka jars: {result.stdout[-2000:]}{result.stderr[-2000:]}")

    def _write_config(self) -> None:
        s = self.settings
        self.paths.config_file.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.voters=1@{s.host}:{s.controller_port}",
                    f"listeners=PLAINTEXT://{s.host}:{s.port},CONTROLLER://{s.host}:{s.controller_port}",
                    f"advertised.listeners=PLAINTEXT://{s.host}:{s.port}",
                    "controller.listener.names=CONTROLLER",
                    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                    "inter.broker.listener.name=PLAINTEXT",
                    f"log.dirs={self.paths.data_dir}",
                    "num.partitions=4",
                    "offsets.topic.replication.factor=1",
                    "offsets.topic.num.partitions=4",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    "share.coordinator.state.topic.replication.factor=1",
                    "share.coordinator.state.topic.min.isr=1",
                    "group.initial.rebalance.delay.ms=0",
                    "auto.create.topics.enable=true",
                    "message.max.bytes=16777216",
                    "",
                ]
            )
        )
        self.paths.log4j_file.write_text(
            "\n".join(
                [
                    "rootLogger.level=WARN",
                    "rootLogger.appenderRef.file.ref=FILE",
                    "appender.file.type=File",
                    "appender.file.name=FILE",
                    f"appender.file.fileName={self.paths.home / 'kafka-server.log'}",
                    "appender.file.layout.type=PatternLayout",
                    "appender.file.layout.pattern=[%d] %p %m (%c)%n",
                    "logger.kafka.name=kafka",
                    "logger.kafka.level=INFO",
                    "",
                ]
            )
        )

    def _format(self) -> None:
        cluster_id = _cluster_id()
        cmd = self._java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(self.paths.config_file))
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise BrokerError(f"formatting Kafka storage failed: {result.stdout[-1500:]}{result.stderr[-1500:]}")

    def _java(self, main: str, *args: str, heap: bool = False) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise BrokerError("Java 17+ ('java') is needed to run the Kafka broker")
        opts = [f"-Xms{self.settings.heap_mb}m", f"-Xmx{self.settings.heap_mb}m"] if heap else ["-Xmx256m"]
        return [
            java,
            *opts,
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.paths.log4j_file}",
            f"-Dkafka.logs.dir={self.paths.home}",
            "-cp",
            f"{self.paths.lib_dir}/*",
            main,
            *args,
        ]

    def _wait_ready(self, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + self.settings.start_timeout_s
        last_error = "no answer"
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self.paths.pid_file.unlink(missing_ok=True)
                tail = self.paths.log_file.read_text(errors="replace")[-2000:]
                raise BrokerError(f"the broker exited with code {proc.returncode}: {tail}")
            if _port_open(self.settings.host, self.settings.port):
                try:
                    self.topics(timeout_s=5)
                    return
                except Exception as exc:  # not ready yet: metadata or coordinator still loading
                    last_error = str(exc)
            time.sleep(0.5)
        raise BrokerError(f"the broker did not answer within {self.settings.start_timeout_s:.0f}s: {last_error}")


def _cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, base64url without padding.

    Like Kafka's own `Uuid.randomUuid`, an id starting with '-' is drawn again:
    `kafka-storage format -t -abc...` would read it as an option (1 start in 32 failed).
    """
    import base64

    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _port_open(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0
