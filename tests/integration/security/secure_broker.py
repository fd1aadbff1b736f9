"""A real Kafka broker with TLS, mutual TLS, SASL and the KRaft StandardAuthorizer, for the security tests.

Everything a test needs is made here: a CA, the broker's certificate (for
127.0.0.1/localhost) and client certificates with the `cryptography`
package; SCRAM users with the broker's own `kafka-configs` tool
(`kafka.admin.ConfigCommand`, from the broker jars). The broker is the
project's `LocalBroker` on free ports with its own data directory; only its
server.properties differ:

* SASL_SSL: SCRAM-SHA-256, SCRAM-SHA-512, PLAIN, OAUTHBEARER (unsecured JWTs,
  the broker's test validator: real OAuth servers are out of reach here);
* SSL with required client certificates (mutual TLS; principal = the DN);
* INTERNAL: plain text for the controller and set-up only, a super user.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from processes import free_port

from trainguard.lab.localkafka.broker import LocalBroker
from trainguard.settings import BrokerSettings

USERS = {"admin": "admin-secret", "collector": "collector-secret", "agent-n1": "agent-secret",
         "worker": "worker-secret", "act": "act-secret", "console": "console-secret", "alerts": "alerts-secret",
         "scram256": "scram256-secret"}
PLAIN_USERS = {"plainuser": "plain-secret"}


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


class Authority:
    """A throw-away certificate authority."""

    def __init__(self, cn: str = "trainguard-test-ca") -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(minutes=5))
                     .not_valid_after(now + datetime.timedelta(days=1))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))

    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, cn: str, *, server: bool) -> tuple[bytes, bytes]:
        """(certificate PEM, private key PEM) for `cn`; a server certificate names 127.0.0.1 and localhost."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(self.cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1)))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def unsecured_jwt(sub: str, lifetime_s: float = 3600) -> str:
    """An unsigned JWT ("alg": "none") as the broker's unsecured OAUTHBEARER validator accepts."""
    def b64(obj: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    now = time.time()
    return f"{b64({'alg': 'none'})}.{b64({'sub': sub, 'iat': now, 'exp': now + lifetime_s, 'scope': 'kafka'})}."


@dataclass
class SecureBroker:
    """The running broker: where its listeners are and where the test material lies."""

    root: Path
    sasl_ssl: str
    ssl: str
    internal: str
    ca_file: Path
    broker: LocalBroker

    def client_cert(self, cn: str, authority: Authority) -> tuple[Path, Path]:
        cert, key = authority.issue(cn, server=False)
        (self.root / f"{cn}.crt").write_bytes(cert)
        (self.root / f"{cn}.key").write_bytes(key)
        return self.root / f"{cn}.crt", self.root / f"{cn}.key"

    def password_file(self, user: str) -> Path:
        path = self.root / f"{user}.password"
        path.write_text(USERS.get(user) or PLAIN_USERS[user])
        path.chmod(0o600)
        return path

    def grant_recommended(self, prefix: str, principals: dict[str, str]) -> None:
        """Create exactly the ACLs `trainguard keys acls` recommends, role -> SCRAM user `principals[role]`."""
        from kafka import KafkaAdminClient
        from kafka.admin import (
            ACL,
            ACLFilter,
            ACLOperation,
            ACLPermissionType,
            ACLResourcePatternType,
            ResourcePattern,
            ResourcePatternFilter,
            ResourceType,
        )

        from trainguard.cli.kafka_acls import recommended
        from trainguard.schemas.kafka_config import client_options

        options = client_options(BrokerSettings.model_validate({
            "bootstrap": self.sasl_ssl, "security_protocol": "SASL_SSL", "tls": {"ca_file": self.ca_file},
            "sasl": {"mechanism": "SCRAM-SHA-512", "username": "admin",
                     "password": {"file": self.password_file("admin")}}}), "kafka-python")
        admin = KafkaAdminClient(bootstrap_servers=self.sasl_ssl, **options)
        acls = [ACL(principal=f"User:{principals[g.role]}", host="*", operation=ACLOperation[g.operation],
                    permission_type=ACLPermissionType.ALLOW,
                    resource_pattern=ResourcePattern(ResourceType[g.resource], g.name,
                                                     ACLResourcePatternType.PREFIXED if g.prefixed
                                                     else ACLResourcePatternType.LITERAL))
                for g in recommended(prefix)]
        try:
            result = admin.create_acls(acls)
            assert not result["failed"], result["failed"]
            # The broker applies ACLs as it replays the metadata log: wait until it describes them all.
            everything = ACLFilter(principal=None, host=None, operation=ACLOperation.ANY,
                                   permission_type=ACLPermissionType.ANY,
                                   resource_pattern=ResourcePatternFilter(ResourceType.ANY, None,
                                                                          ACLResourcePatternType.ANY))
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                known = {(a.principal, a.operation, a.resource_pattern.resource_name)
                         for a in admin.describe_acls(everything)[0]}
                if all((a.principal, a.operation, a.resource_pattern.resource_name) in known for a in acls):
                    break
                time.sleep(0.2)
            time.sleep(1.0)  # describe answers from the controller's view; give the authorizer a moment more
        finally:
            admin.close()

    def kafka_configs(self, *args: str) -> None:
        """The broker's own `kafka-configs` tool against the internal listener."""
        cmd = self.broker._java("kafka.admin.ConfigCommand", "--bootstrap-server", self.internal, *args)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"kafka-configs failed: {done.stdout[-1500:]} {done.stderr[-1500:]}")


class _SecureLocalBroker(LocalBroker):
    def __init__(self, settings: BrokerSettings, lib_dir: Path, extra: list[str]) -> None:
        super().__init__(settings, lib_dir=lib_dir)
        self._extra = extra

    def _write_config(self) -> None:
        super()._write_config()
        lines = [line for line in self.paths.config_file.read_text().splitlines()
                 if not line.startswith(("listeners=", "advertised.listeners=", "listener.security.protocol.map=",
                                         "inter.broker.listener.name="))]
        self.paths.config_file.write_text("\n".join([*lines, *self._extra, ""]))


def start(root: Path, authority: Authority, lib_dir: Path) -> SecureBroker:
    """Make the certificates, start the broker, create the SCRAM users; the caller stops it."""
    root.mkdir(parents=True, exist_ok=True)
    ca_file = root / "ca.pem"
    ca_file.write_bytes(authority.pem())
    cert, key = authority.issue("localhost", server=True)
    keystore = root / "server.pem"
    keystore.write_bytes(key + cert)  # Kafka's PEM key store: the key, then the chain
    sasl_port, ssl_port, internal_port, controller_port = (free_port() for _ in range(4))
    plain = " ".join(f'user_{u}="{p}"' for u, p in PLAIN_USERS.items())
    extra = [
        f"listeners=SASL_SSL://127.0.0.1:{sasl_port},SSL://127.0.0.1:{ssl_port},"
        f"INTERNAL://127.0.0.1:{internal_port},CONTROLLER://127.0.0.1:{controller_port}",
        f"advertised.listeners=SASL_SSL://127.0.0.1:{sasl_port},SSL://127.0.0.1:{ssl_port},"
        f"INTERNAL://127.0.0.1:{internal_port}",
        "listener.security.protocol.map=SASL_SSL:SASL_SSL,SSL:SSL,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name=INTERNAL",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={keystore}",
        "ssl.truststore.type=PEM", f"ssl.truststore.location={ca_file}",
        "listener.name.ssl.ssl.client.auth=required",
        "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512,PLAIN,OAUTHBEARER",
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config="
        "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config="
        "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config="
        f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain};",
        "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config="
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
        "listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class="
        "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        # Super users: set-up (ANONYMOUS on INTERNAL), and the principals of the connectivity test.
        # collector, agent-n1, worker and act get only what the ACL test grants them.
        "super.users=User:ANONYMOUS;User:admin;User:scram256;User:plainuser;User:CN=collector-mtls",
        "allow.everyone.if.no.acl.found=false",
    ]
    settings = BrokerSettings(host="127.0.0.1", port=internal_port, controller_port=controller_port,
                              data_dir=root / "kafka", heap_mb=384, start_timeout_s=120)
    broker = _SecureLocalBroker(settings, lib_dir, extra)
    broker.start(fresh=True)
    secure = SecureBroker(root=root, sasl_ssl=f"127.0.0.1:{sasl_port}", ssl=f"127.0.0.1:{ssl_port}",
                          internal=f"127.0.0.1:{internal_port}", ca_file=ca_file, broker=broker)
    scram = [f"SCRAM-SHA-512=[iterations=4096,password={p}]" for u, p in USERS.items() if u != "scram256"]
    for (user, _password), config in zip([(u, p) for u, p in USERS.items() if u != "scram256"], scram):
        secure.kafka_configs("--alter", "--add-config", config, "--entity-type", "users", "--entity-name", user)
    secure.kafka_configs("--alter", "--add-config", f"SCRAM-SHA-256=[iterations=4096,password={USERS['scram256']}]",
                         "--entity-type", "users", "--entity-name", "scram256")
    return secure
