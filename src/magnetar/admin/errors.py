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


def reason_response(
    status: int, reason: str, headers: dict[str, str] | None = None
) -> web.Response:
    # The status line says it too, as the routes' refusals always have (one short line).
    line = " ".join(reason.split())[:300]
    return web.json_response({"reason": reason}, status=status, headers=headers, reason=line)


def fail(error: type[web.HTTPException], message: str) -> NoReturn:
    """Raise ``error`` whose body is ``{"reason": message}``."""
    line = " ".join(message.split())[:300]  # a status line holds one short line
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
        return reason_response(500, f"{type(exc).__name__}: {exc}")
