"""Test TLS material and in-memory TLS sessions, for fixtures, tests and the TLS benchmark capture.

- ``TlsPki.create(folder)``: a test CA and a server certificate for ``localhost``/127.0.0.1/::1
  (EC P-256, ``cryptography``), written as PEM files. Test keys only: they protect nothing.
- ``MemoryTls``: a real TLS client and server (Python's ``ssl``, OpenSSL) joined by memory BIOs.
  Application data written on either side comes out as the TLS record bytes each peer sent
  (``turns``: ``(direction, bytes)`` in the order the peers wrote them), and the client's
  ``keylog_filename`` gets the session's NSS key log lines. Nothing touches the network.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VERSIONS = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}
VALID_DAYS = 3650  # committed fixtures must not expire under the tests


@dataclass(frozen=True)
class TlsPki:
    ca_cert: Path
    server_cert: Path
    server_key: Path

    @classmethod
    def create(cls, folder: str | Path) -> "TlsPki":
        """The CA and server files in ``folder`` (made once; an existing set is reused)."""
        folder = Path(folder)
        pki = cls(folder / "ca.pem", folder / "server.pem", folder / "server.key")
        if all(p.exists() for p in (pki.ca_cert, pki.server_cert, pki.server_key)):
            return pki
        folder.mkdir(parents=True, exist_ok=True)
        now = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "amqplens test CA")])
        ca = (
            x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                 x509.IPAddress(ipaddress.ip_address("::1"))]
        server = (
            x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name).public_key(server_key.public_key()).serial_number(2)
            .not_valid_before(now).not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        pki.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        pki.server_cert.write_bytes(server.public_bytes(serialization.Encoding.PEM))
        pki.server_key.write_bytes(server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        return pki

    def client_context(self, version: str, keylog: str | Path | None, ciphers: str | None = None) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.load_verify_locations(self.ca_cert)
        ctx.minimum_version = ctx.maximum_version = VERSIONS[version]
        if ciphers:
            ctx.set_ciphers(ciphers)
        if keylog is not None:
            ctx.keylog_filename = str(keylog)
        return ctx

    def server_context(self, version: str, ciphers: str | None = None) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.server_cert, self.server_key)
        ctx.minimum_version = ctx.maximum_version = VERSIONS[version]
        if ciphers:
            ctx.set_ciphers(ciphers)
        return ctx


class MemoryTls:
    """One TLS session between two SSLObjects; ``write(direction, data)`` and ``turns``."""

    def __init__(self, pki: TlsPki, version: str, keylog: str | Path | None, ciphers: str | None = None,
                 keep_received: bool = True) -> None:
        self._bios = {d: (ssl.MemoryBIO(), ssl.MemoryBIO()) for d in ("client", "server")}
        cin, cout = self._bios["client"]
        sin, sout = self._bios["server"]
        self.client = pki.client_context(version, keylog, ciphers).wrap_bio(cin, cout, server_hostname="localhost")
        self.server = pki.server_context(version, ciphers).wrap_bio(sin, sout, server_side=True)
        self.turns: list[tuple[str, bytes]] = []
        self.received = {"to_server": bytearray(), "to_client": bytearray()}
        self.keep_received = keep_received  # False: what each peer reads is dropped (long sessions)
        self._handshake()

    def _move(self) -> bool:
        moved = False
        for side, direction, peer in (("client", "to_server", "server"), ("server", "to_client", "client")):
            data = self._bios[side][1].read()
            if data:
                self.turns.append((direction, data))
                self._bios[peer][0].write(data)
                moved = True
        return moved

    def _handshake(self) -> None:
        done = {"client": False, "server": False}
        for _ in range(20):
            for side in ("client", "server"):
                if not done[side]:
                    try:
                        getattr(self, side).do_handshake()
                        done[side] = True
                    except ssl.SSLWantReadError:
                        pass
            if not self._move() and all(done.values()):
                return
        raise RuntimeError("the in-memory TLS handshake did not finish")

    def _drain(self) -> None:
        for obj, direction in ((self.server, "to_server"), (self.client, "to_client")):
            while True:
                try:
                    data = obj.read(1 << 16)
                except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                    break
                if not data:
                    break
                if self.keep_received:
                    self.received[direction] += data

    def write(self, direction: str, data: bytes) -> None:
        """``data`` from the client (``to_server``) or the server (``to_client``), as the records the peer sends."""
        (self.client if direction == "to_server" else self.server).write(data)
        while self._move():
            self._drain()
        self._drain()

    def close(self) -> None:
        """Both sides send close_notify."""
        for obj in (self.client, self.server):
            try:
                obj.unwrap()
            except (ssl.SSLWantReadError, ssl.SSLError):
                pass
            self._move()
        self._drain()
