"""The connection facts every codec shares: the facts' keys, credential redaction, text of a value.

A redacted value reads ``<redacted len=N>``; with a ``redaction_key`` it also
carries an HMAC-SHA256 prefix (``<redacted hmac-sha256:... len=N>``), so equal
secrets can be matched without being stored. A plain hash is never written:
a password's SHA-256 falls to a dictionary.
"""

from __future__ import annotations

import hashlib
import hmac


FACT_KEYS = (
    "connection_id",
    "dialect",
    "dialect_source",  # protocol_header | connection_start | framing
    "client_protocol_header",
    "server_protocol_header",  # a server's rejection: the version it speaks, then it closes
    "protocol_rejected",
    "version_major",
    "version_minor",
    "channel_max",
    "frame_max",
    "heartbeat",
    "server_channel_max",
    "server_frame_max",
    "server_heartbeat",
    "server_properties_json",
    "server_product",
    "server_version",
    "server_platform",
    "server_capabilities_json",
    "server_mechanisms",
    "server_locales",
    "client_properties_json",
    "client_product",
    "client_version",
    "client_platform",
    "client_capabilities_json",
    "sasl_mechanism",
    "user",
    "locale",
    "vhost",
    "close_code",
    "close_text",
    "close_class_id",
    "close_method_id",
    "closed_by",  # client | server: who sent connection.close first
    "close_ok_seen",
    "blocked_count",
    "last_blocked_reason",
    "transport_end_reason",
    "transport_closed_by",
)

def redact(secret, key: bytes | None = None) -> str:
    raw = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret or b"")
    if key:
        mac = hmac.new(key, raw, hashlib.sha256).hexdigest()[:16]
        return f"<redacted hmac-sha256:{mac} len={len(raw)}>"
    return f"<redacted len={len(raw)}>"


def text(value) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return str(value)
