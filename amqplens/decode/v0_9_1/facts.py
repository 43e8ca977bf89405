"""Connection-level facts from connection-class methods, and credential redaction.

``ConnectionFacts.on_method`` sees every decoded method before its row is
rendered, so it can both learn from it (negotiated limits, peer identity, SASL
mechanism and user, vhost, close) and redact it in place: the SASL response of
start-ok and secure-ok and the new secret of update-secret never reach a row.
The user name is kept (PLAIN's authcid, AMQPLAIN's LOGIN, EXTERNAL's authzid).

A redacted value reads ``<redacted len=N>``; with a ``redaction_key`` it also
carries an HMAC-SHA256 prefix (``<redacted hmac-sha256:... len=N>``), so equal
secrets can be matched without being stored. A plain hash is never written:
a password's SHA-256 falls to a dictionary.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from amqplens.decode.common.facts import FACT_KEYS, redact  # noqa: F401  (this package's names)
from amqplens.decode.errors import DecodeError
from amqplens.decode.v0_9_1.fieldtable import FieldTableReader
from amqplens.decode.common.facts import text as _text
from amqplens.decode.v0_9_1.rows import to_json

_SIDE = {"to_server": "client", "to_client": "server"}


def sasl_user(mechanism, response) -> str | None:
    """The user name in a SASL response, never the password (every dialect's: AMQPLAIN's response is a 0-9-1 field table,
    which is why it lives here)."""
    mech = (_text(mechanism) or "").upper()
    raw = response.encode("utf-8") if isinstance(response, str) else bytes(response or b"")
    if mech == "PLAIN":
        parts = raw.split(b"\0")
        return _text(parts[1]) if len(parts) == 3 else None
    if mech == "AMQPLAIN":  # a field table without its length prefix
        try:
            login = FieldTableReader().read_entries(memoryview(raw)).get("LOGIN")
        except DecodeError:
            return None
        return _text(login)
    if mech == "EXTERNAL":
        return _text(raw) or None
    return None


class ConnectionFacts:
    # (class, method) -> the handler of its arguments, set below the class (a dialect's subclass sets its own)
    HANDLERS: ClassVar[dict[tuple[str, str], Callable[[Any, str, dict], None]]] = {}

    def __init__(self, connection_id: str, redaction_key: bytes | None = None, redact_secrets: bool = True) -> None:
        self.facts: dict[str, Any] = dict.fromkeys(FACT_KEYS)
        self.facts["connection_id"] = connection_id
        self.facts["blocked_count"] = 0
        self.redaction_key = redaction_key
        self.redact_secrets = redact_secrets

    def on_method(self, direction: str, class_name: str, method_name: str, args: dict) -> None:
        handler = self.HANDLERS.get((class_name, method_name))
        if handler is not None:
            handler(self, direction, args)

    def _redact(self, args: dict, name: str) -> None:
        if self.redact_secrets and name in args:
            args[name] = redact(args[name], self.redaction_key)

    # -- handlers (dispatched by (class, method) in HANDLERS) ------------------------------
    def _peer(self, side: str, props) -> None:
        if not isinstance(props, dict):
            return
        f = self.facts
        f[f"{side}_properties_json"] = to_json(props)
        for key in ("product", "version", "platform"):
            f[f"{side}_{key}"] = _text(props.get(key))
        caps = props.get("capabilities")
        f[f"{side}_capabilities_json"] = to_json(caps) if caps is not None else None

    def _start(self, direction: str, args: dict) -> None:
        f = self.facts
        f["version_major"], f["version_minor"] = args.get("version_major"), args.get("version_minor")
        self._peer("server", args.get("server_properties"))
        f["server_mechanisms"] = _text(args.get("mechanisms"))
        f["server_locales"] = _text(args.get("locales"))

    def _start_ok(self, direction: str, args: dict) -> None:
        f = self.facts
        self._peer("client", args.get("client_properties"))
        f["sasl_mechanism"] = _text(args.get("mechanism"))
        f["locale"] = _text(args.get("locale"))
        if "response" in args:
            f["user"] = sasl_user(f["sasl_mechanism"], args["response"])
        self._redact(args, "response")

    def _secure_ok(self, direction: str, args: dict) -> None:
        self._redact(args, "response")

    def _update_secret(self, direction: str, args: dict) -> None:
        self._redact(args, "new_secret")

    def _tune(self, direction: str, args: dict) -> None:
        f = self.facts
        f["server_channel_max"], f["server_frame_max"] = args.get("channel_max"), args.get("frame_max")
        f["server_heartbeat"] = args.get("heartbeat")
        for key in ("channel_max", "frame_max", "heartbeat"):  # until tune-ok says otherwise
            if f[key] is None:
                f[key] = args.get(key)

    TUNE_OK_ARGS = (("channel_max", "channel_max"), ("frame_max", "frame_max"), ("heartbeat", "heartbeat"))  # (fact, argument)

    def _tune_ok(self, direction: str, args: dict) -> None:
        for key, arg in self.TUNE_OK_ARGS:
            if args.get(arg) is not None:
                self.facts[key] = args[arg]

    def _open(self, direction: str, args: dict) -> None:
        self.facts["vhost"] = _text(args.get("virtual_host"))

    def _close(self, direction: str, args: dict) -> None:
        f = self.facts
        if f["closed_by"] is None:
            f["closed_by"] = _SIDE.get(direction)
            f["close_code"], f["close_text"] = args.get("reply_code"), _text(args.get("reply_text"))
            f["close_class_id"], f["close_method_id"] = args.get("class_id"), args.get("method_id")

    def _close_ok(self, direction: str, args: dict) -> None:
        self.facts["close_ok_seen"] = True

    def _blocked(self, direction: str, args: dict) -> None:
        self.facts["blocked_count"] += 1
        self.facts["last_blocked_reason"] = _text(args.get("reason"))


ConnectionFacts.HANDLERS = {
    ("connection", "start"): ConnectionFacts._start,
    ("connection", "start-ok"): ConnectionFacts._start_ok,
    ("connection", "secure-ok"): ConnectionFacts._secure_ok,
    ("connection", "update-secret"): ConnectionFacts._update_secret,
    ("connection", "tune"): ConnectionFacts._tune,
    ("connection", "tune-ok"): ConnectionFacts._tune_ok,
    ("connection", "open"): ConnectionFacts._open,
    ("connection", "close"): ConnectionFacts._close,
    ("connection", "close-ok"): ConnectionFacts._close_ok,
    ("connection", "blocked"): ConnectionFacts._blocked,
}
# classes whose methods any handler looks at: the stream decoder skips ``on_method`` for the others
FACT_CLASSES = frozenset(c for c, _ in ConnectionFacts.HANDLERS)
