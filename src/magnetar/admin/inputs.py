"""What the admin API reads from a request, checked once before any route sees it.

- The names in the path (tenant, namespace, topic, subscription) obey the broker's one
  rule for names that become file names (:func:`magnetar.protocol.topic_name.name_problem`,
  which the binary protocol's SUBSCRIBE applies too): no control character (``%00``),
  no lone surrogate, at most ``MAX_QUOTED_NAME`` bytes once quoted. Pulsar's rules on
  the characters of a tenant or topic stay the routes' (412, as Pulsar answers).
- Every body but the raw-ingest payload (which is bytes) is UTF-8 text; JSON in it nests
  at most ``MAX_JSON_DEPTH`` deep and has no lone surrogate (``"\\ud800"``), which no
  file, schema or reply could hold.

Each refusal is a 400 that names the rule, before a route parses anything or touches
the file system; the checks are linear in the body (at most aiohttp's 1 MiB), done by
the ``re`` engine and ``str`` methods rather than a Python loop per character.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate

from aiohttp import web

from magnetar.admin.errors import Handler, fail
from magnetar.admin.raw_entries import PATH as RAW_ENTRY_PATH
from magnetar.protocol.topic_name import name_problem

MAX_JSON_DEPTH = 64

# match_info keys that name something stored, and what each is called.
_NAMES = {"tenant": "tenant", "namespace": "namespace", "topic": "topic", "sub": "subscription"}

# A JSON string (the unrolled form is linear even when it never ends), or an escape
# outside one, so that a failed string never restarts at an escaped quote.
_STRING_OR_ESCAPE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|\\.', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
# Each bracket's step in depth, by its byte (what is left once strings are removed).
_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


@web.middleware
async def checked_input(request: web.Request, handler: Handler) -> web.StreamResponse:
    """400 for a name or a body the broker cannot take (see the module's docstring)."""
    info = request.match_info
    for key, kind in _NAMES.items():
        value = info.get(key)
        if value is not None:
            problem = name_problem(kind, value)
            if problem:
                fail(web.HTTPBadRequest, problem)
    route = getattr(info.route, "resource", None)
    if request.body_exists and (route is None or route.canonical != RAW_ENTRY_PATH):
        problem = body_problem(await request.read())  # kept: the route reads it again
        if problem:
            fail(web.HTTPBadRequest, problem)
    return await handler(request)


def body_problem(body: bytes) -> str | None:
    """Why ``body`` is refused, or None."""
    try:
        text = body.decode()
    except UnicodeDecodeError as exc:
        return f"the body is not UTF-8 text: {exc.reason} at byte {exc.start}"
    return json_problem(text)


def json_problem(text: str) -> str | None:
    """Why ``text``, if it is JSON, is refused: nested deeper than MAX_JSON_DEPTH, or a
    lone surrogate. Text that is not JSON (a bare word some routes take) passes here."""
    brackets = _NOT_BRACKET.sub("", _STRING_OR_ESCAPE.sub("", text)).encode()
    if brackets and max(accumulate(map(_STEP.__getitem__, brackets))) > MAX_JSON_DEPTH:
        return f"the JSON body nests deeper than {MAX_JSON_DEPTH} levels"
    if _SURROGATE_ESCAPE.search(text):
        try:
            doc = json.loads(text)
        except ValueError:
            return None
        try:
            json.dumps(doc, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            return "the JSON body holds a lone surrogate (such as \"\\ud800\"): not Unicode text"
    return None
