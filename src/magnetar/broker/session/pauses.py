"""Why the broker is not reading a connection: the bits of ``ServerCnx.read_paused``."""

PAUSED_PENDING = 1  # max_pending_publish_requests_per_connection messages unreceipted
PAUSED_BUFFER = 2  # the broker-wide publish buffer is over max_message_publish_buffer_bytes
PAUSED_WRITE = 4  # its write buffer is over the high-water mark (the peer does not read)
PAUSED_TURN = 8  # one read's frames took a loop turn's share; the rest wait for the next turn
