"""Command handlers of a client connection, one module per family of commands.

Each handler is a function ``handle_x(cnx, command, frame)``; ``ServerCnx`` owns the
socket and the framing and looks a handler up by command type. A handler raises
``CommandError`` to answer the request that caused it with an ERROR.
"""
