"""TCP reassembly: flow-sorted packet batches in, connections, gaps and stream bytes out."""

from amqplens.decode.tcp.reassembly import (
    ReassemblyStats,
    TcpReassembler,
    connection_id,
)
from amqplens.decode.tcp.records import (
    TO_CLIENT,
    TO_SERVER,
    ConnectionInfo,
    ConnectionRecord,
    GapRecord,
    StreamConsumer,
)
from amqplens.decode.tcp.stream import GAP_MISSING, GAP_OVERFLOW, GAP_SNAPLEN

__all__ = [
    "GAP_MISSING",
    "GAP_OVERFLOW",
    "GAP_SNAPLEN",
    "TO_CLIENT",
    "TO_SERVER",
    "ConnectionInfo",
    "ConnectionRecord",
    "GapRecord",
    "ReassemblyStats",
    "StreamConsumer",
    "TcpReassembler",
    "connection_id",
]
