"""Every admin error as Pulsar's REST API answers one: its status and the JSON body
``{"reason": "..."}``, whatever raised it (a route's ``web.HTTPException`` with a
``reason``, aiohttp's own 404 and 405 for a path or method no route has, or an
unexpected exception, which is a 500 that names it)."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import NoReturn

from aiohttp import web

log = logging.getLogger("magnetar.admin")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Headers of the refusal worth keeping (405's Allow); the body's are replaced.
_DROPPED = {"content-type", "content-length"}


def status_line(reason: str) -> str:
    """``reason`` as a status line holds it: one short line of printable characters
    (a name with a NUL in it would otherwise make aiohttp drop the connection)."""
    line = " ".join(reason.split())[:300]
    if not line.isprintable():
        line = "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)[:300]
    return line


def reason_response(
    status: int, reason: str, headers: dict[str, str] | None = None
) -> web.Response:
    # The status line says it too, as the routes' refusals always have (one short line).
    line = status_line(reason)
    return web.json_response({"reason": reason}, status=status, headers=headers, reason=line)


def fail(error: type[web.HTTPException], message: str) -> NoReturn:
    """Raise ``error`` whose body is ``{"reason": message}``."""
    line = status_line(message)
    text = json.dumps({"reason": message})
    if issubclass(error, web.HTTPMethodNotAllowed):  # the operation, not the method
        raise error("", [], reason=line, text=text, content_type="application/json")
    raise error(reason=line, text=text, content_type="application/json")


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Outermost middleware: an error without a JSON body gets ``{"reason": ...}``."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400 or exc.content_type == "application/json":
            raise
        headers = {k: v for k, v in exc.headers.items() if k.lower() not in _DROPPED}
        return reason_response(exc.status, exc.reason, headers)
    except Exception as exc:  # a bug or a storage failure: still Pulsar's shape
        log.exception("admin request %s %s failed", request.method, request.path)
        # An OSError's text names files (the data directory): the log has them, the
        # client gets the cause alone.
        cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        return reason_response(500, f"{type(exc).__name__}: {cause}")
