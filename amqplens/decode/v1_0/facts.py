"""Connection-level facts of an AMQP 1.0 connection, and credential redaction.

``ConnectionFacts.on_performative`` sees every decoded open, close and SASL
frame before its row is rendered, so it can learn from it (container-id,
limits, capabilities, SASL mechanism, outcome and user, close error) and
redact it in place: the initial-response of sasl-init and the response of
sasl-response never reach a row (``<redacted len=N>``, as the 0-9-1 codec's
``facts.redact`` writes it). The user name of a PLAIN initial-response is kept.
"""

from __future__ import annotations

from amqplens.decode.common.facts import redact
from amqplens.decode.v0_9_1.facts import sasl_user  # AMQPLAIN's response is a 0-9-1 field table
from amqplens.decode.v1_0.composites import SASL_CODE, to_json
from amqplens.decode.v1_0.rows import error_fields

_PER_SIDE = (
    "protocol_header",  # hex of the first protocol header the side sent
    "container_id",
    "hostname",
    "max_frame_size",
    "channel_max",
    "idle_timeout_ms",
    "offered_capabilities_json",
    "desired_capabilities_json",
    "properties_json",
    "product",
    "version",
    "platform",
)
FACT_KEYS = (
    "connection_id",
    "dialect",
    "dialect_source",  # protocol_header, or framing for a capture that starts mid-stream
    "channel_max",  # effective: the smaller of the two open frames' channel-max (named as in 0-9-1's facts)
    "frame_max",  # effective: the smaller of the two max-frame-size
    "protocol_rejected",  # the server's first protocol header differs from the client's (§2.2: it then closes)
    "sasl",  # a SASL layer was negotiated (AMQP 3 1 0 0)
    "tls",  # a TLS header (AMQP 2 1 0 0) was sent; what follows is not decoded
    *(f"client_{k}" for k in _PER_SIDE),
    *(f"server_{k}" for k in _PER_SIDE),
    "sasl_mechanisms",  # JSON list the server offered
    "sasl_mechanism",
    "sasl_hostname",
    "sasl_outcome",  # sasl-code: 0 ok, 1 auth, 2 sys, 3 sys-perm, 4 sys-temp
    "sasl_outcome_name",
    "user",
    "close_condition",
    "close_description",
    "closed_by",  # client | server: who sent close first
    "close_seen_client",
    "close_seen_server",
    "transport_end_reason",
    "transport_closed_by",
)
_SIDE = {"to_server": "client", "to_client": "server"}
_SECRETS = {"sasl-init": "initial_response", "sasl-response": "response"}


def _text(value) -> str | None:
    if value is None or isinstance(value, str):
        return None if value is None else str(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "backslashreplace")
    return None


def _uint(value, bits: int = 32) -> int | None:
    """A field the spec types unsigned of ``bits`` bits; a peer's value outside that (a negative int, a ulong where a
    ushort belongs) is left out, as it was sent it stays in the open frame's arguments_json (the connections columns
    are counts and limits that connections.non_negative, our invariant, checks)."""
    return value if type(value) is int and 0 <= value < 1 << bits else None


def _symbols(value) -> str | None:
    if value is None:
        return None
    return to_json(value if isinstance(value, list) else [value])  # multiple="true": one value or an array


class ConnectionFacts:
    def __init__(self, connection_id: str, redaction_key: bytes | None = None, redact_secrets: bool = True) -> None:
        self.facts = dict.fromkeys(FACT_KEYS)
        self.facts["connection_id"] = connection_id
        self.facts["dialect"] = "1.0"
        self.redaction_key = redaction_key
        self.redact_secrets = redact_secrets

    def on_protocol_header(self, direction: str, head: bytes, name: str | None) -> None:
        f = self.facts
        key = f"{_SIDE[direction]}_protocol_header"
        if f[key] is None:  # the first one: the version (or security layer) each side asks for
            f[key] = head.hex()
            other = f["server_protocol_header" if direction == "to_server" else "client_protocol_header"]
            if other is not None:
                f["protocol_rejected"] = other != f[key]
        f["dialect_source"] = "protocol_header"
        if name == "1.0-sasl":
            self.facts["sasl"] = True
        elif name == "1.0-tls":
            self.facts["tls"] = True

    def on_performative(self, direction: str, name: str, args: dict) -> None:
        handler = _HANDLERS.get(name)
        if handler is not None:
            handler(self, _SIDE[direction], args)

    # -- handlers ---------------------------------------------------------------------------
    def _open(self, side: str, args: dict) -> None:
        f = self.facts
        f[f"{side}_container_id"] = _text(args.get("container_id"))
        f[f"{side}_hostname"] = _text(args.get("hostname"))
        f[f"{side}_max_frame_size"] = _uint(args.get("max_frame_size"))
        f[f"{side}_channel_max"] = _uint(args.get("channel_max"), 16)
        f[f"{side}_idle_timeout_ms"] = _uint(args.get("idle_time_out"))
        f[f"{side}_offered_capabilities_json"] = _symbols(args.get("offered_capabilities"))
        f[f"{side}_desired_capabilities_json"] = _symbols(args.get("desired_capabilities"))
        for key, side_key in (("channel_max", "channel_max"), ("frame_max", "max_frame_size")):
            known = [v for v in (f[f"client_{side_key}"], f[f"server_{side_key}"]) if v is not None]
            f[key] = min(known) if known else None
        props = args.get("properties")
        if isinstance(props, dict):
            f[f"{side}_properties_json"] = to_json(props)
            for key in ("product", "version", "platform"):
                f[f"{side}_{key}"] = _text(props.get(key))

    def _close(self, side: str, args: dict) -> None:
        f = self.facts
        f[f"close_seen_{side}"] = True
        if f["closed_by"] is None:
            f["closed_by"] = side
            f["close_condition"], f["close_description"] = error_fields(args.get("error"))

    def _mechanisms(self, side: str, args: dict) -> None:
        self.facts["sasl_mechanisms"] = _symbols(args.get("sasl_server_mechanisms"))

    def _init(self, side: str, args: dict) -> None:
        f = self.facts
        f["sasl_mechanism"] = _text(args.get("mechanism"))
        f["sasl_hostname"] = _text(args.get("hostname"))
        if isinstance(args.get("initial_response"), bytes):
            f["user"] = sasl_user(f["sasl_mechanism"], args["initial_response"])
        self._redact(args, "initial_response")

    def _response(self, side: str, args: dict) -> None:
        self._redact(args, "response")

    def _outcome(self, side: str, args: dict) -> None:
        code = _uint(args.get("code"))
        self.facts["sasl_outcome"] = code
        self.facts["sasl_outcome_name"] = SASL_CODE.get(code)

    def _redact(self, args: dict, name: str) -> None:
        if self.redact_secrets and name in args:
            value = args[name]
            args[name] = redact(value if isinstance(value, (bytes, str)) else repr(value), self.redaction_key)


_HANDLERS = {
    "open": ConnectionFacts._open,
    "close": ConnectionFacts._close,
    "sasl-mechanisms": ConnectionFacts._mechanisms,
    "sasl-init": ConnectionFacts._init,
    "sasl-response": ConnectionFacts._response,
    "sasl-outcome": ConnectionFacts._outcome,
}
