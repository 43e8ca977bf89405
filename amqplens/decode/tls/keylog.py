"""NSS key log files (``SSLKEYLOGFILE``): the secrets of each TLS session, by ClientHello random.

Each line is ``LABEL <client_random hex> <secret hex>``; ``#`` starts a comment. TLS 1.2 sessions
have ``CLIENT_RANDOM`` (the 48-byte master secret), TLS 1.3 sessions the four traffic secrets.
A line that does not read is counted and skipped, never raised. The secrets never leave this
object: its ``repr`` names only how many sessions it holds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

CLIENT_RANDOM = "CLIENT_RANDOM"  # TLS 1.2: the master secret
CLIENT_HANDSHAKE = "CLIENT_HANDSHAKE_TRAFFIC_SECRET"
SERVER_HANDSHAKE = "SERVER_HANDSHAKE_TRAFFIC_SECRET"
CLIENT_TRAFFIC_0 = "CLIENT_TRAFFIC_SECRET_0"
SERVER_TRAFFIC_0 = "SERVER_TRAFFIC_SECRET_0"
LABELS = frozenset((CLIENT_RANDOM, CLIENT_HANDSHAKE, SERVER_HANDSHAKE, CLIENT_TRAFFIC_0, SERVER_TRAFFIC_0))
RANDOM_LEN = 32
MAX_SECRET_LEN = 64  # the longest hash of a TLS suite (SHA-384 is 48); longer is not a secret of ours


class KeyLog:
    """Secrets by client random: ``{random: {label: secret}}``."""

    def __init__(self, sessions: dict[bytes, dict[str, bytes]] | None = None, skipped_lines: int = 0) -> None:
        self.sessions = sessions or {}
        self.skipped_lines = skipped_lines

    @classmethod
    def parse(cls, lines: Iterable[str]) -> "KeyLog":
        sessions: dict[bytes, dict[str, bytes]] = {}
        skipped = 0
        for line in lines:
            parts = line.split()
            if not parts or parts[0].startswith("#"):
                continue
            if len(parts) != 3 or parts[0] not in LABELS:
                skipped += 1  # another label (early data, exporter secrets) or a damaged line
                continue
            try:
                random, secret = bytes.fromhex(parts[1]), bytes.fromhex(parts[2])
            except ValueError:
                skipped += 1
                continue
            if len(random) != RANDOM_LEN or not 0 < len(secret) <= MAX_SECRET_LEN:
                skipped += 1
                continue
            sessions.setdefault(random, {})[parts[0]] = secret
        return cls(sessions, skipped)

    @classmethod
    def read(cls, paths: Iterable[str]) -> "KeyLog":
        """Every file's lines (later files win for a repeated label); unreadable text is skipped."""
        sessions: dict[bytes, dict[str, bytes]] = {}
        skipped = 0
        for path in paths:
            with open(path, encoding="ascii", errors="replace") as f:
                one = cls.parse(f)
            for random, secrets in one.sessions.items():
                sessions.setdefault(random, {}).update(secrets)
            skipped += one.skipped_lines
        return cls(sessions, skipped)

    def secrets(self, client_random: bytes) -> dict[str, bytes]:
        return self.sessions.get(client_random, {})

    def __len__(self) -> int:
        return len(self.sessions)

    def fingerprint(self) -> str:
        """Which sessions the log covers, as a digest of the client randoms and labels (no secret goes in):
        a run with another key log decodes other rows."""
        h = hashlib.blake2b(digest_size=8)
        for random in sorted(self.sessions):
            h.update(random + ",".join(sorted(self.sessions[random])).encode())
        return h.hexdigest()

    def __repr__(self) -> str:
        return f"KeyLog(sessions={len(self.sessions)}, id={self.fingerprint()})"

    __str__ = __repr__
