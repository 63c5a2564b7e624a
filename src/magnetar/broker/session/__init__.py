"""One client connection and what it says: ServerCnx (the transport), the command handlers,
what a client can take (its quirks), connection limits, advertised listeners, idle polling
and the checks an entry passes before it is stored."""
