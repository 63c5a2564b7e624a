"""What a connected client can take, beyond its protocol version.

Some official clients announce a protocol version whose commands they do not all
handle. The C++ library (``Pulsar-CPP-v...``, inside the Python, Node.js and C#
wrappers too) up to 4.2 has no case for REACHED_END_OF_TOPIC: it logs "Received
invalid message from server", drops the connection, reconnects, is told again, and so
on every 100 ms (Apache Pulsar brokers cause the same churn). Such clients are not
told; their receive simply times out at the end of a terminated topic.
"""

from __future__ import annotations

import re

_CPP_VERSION = re.compile(r"^Pulsar-CPP-v(\d+)\.(\d+)")
_CPP_FIRST_WITH_END_OF_TOPIC = (4, 3)


def understands_end_of_topic(client_version: str, protocol_version: int) -> bool:
    if protocol_version < 9:  # the command came with protocol v9
        return False
    match = _CPP_VERSION.match(client_version)
    if match is None:
        return True
    return (int(match.group(1)), int(match.group(2))) >= _CPP_FIRST_WITH_END_OF_TOPIC
