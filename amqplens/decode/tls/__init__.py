"""TLS inside the decode task: record layer, hello parsing and key schedule (RFC 5246, RFC 8446, RFC 7905).

``TlsLayer`` sits where a codec sits in ``amqplens.decode.codecs.DecodingConsumer``: it takes the TCP
stream bytes of a connection that opened with a TLS handshake, matches the ClientHello random
with a key log (``KeyLog``, NSS format), decrypts the records and feeds the application data to
an inner ``DecodingConsumer`` as if it were a plaintext stream. Only the AEAD primitives come from
``cryptography``; everything else is written here.
"""

from amqplens.decode.tls.keylog import KeyLog
from amqplens.decode.tls.layer import TLS_STATUSES, TlsLayer

__all__ = ["KeyLog", "TlsLayer", "TLS_STATUSES"]
