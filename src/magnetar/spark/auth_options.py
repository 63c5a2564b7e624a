"""``pulsar.client.authPluginClassName`` / ``authParams`` as the official clients read them.

Token authentication takes its parameter in any of Pulsar's forms: ``token:<jwt>``,
``file:///path`` (the file's contents, read at every connect so that a rotated token
is picked up), ``data:[;base64],<jwt>`` (a data URL), ``env:NAME`` (an environment
variable, read at every connect), JSON ``{"token": "..."}``, or the bare token.  TLS
authentication takes ``tlsCertFile:/a,tlsKeyFile:/b`` or the same as JSON; basic
authentication JSON ``{"userId": "...", "password": "..."}`` (or ``user:password``).

An :class:`AuthSpec` is what the options say, checked on the driver and picklable; each
executor builds its :class:`~magnetar.client.Authentication` from it with
:meth:`AuthSpec.provider`, reading files and variables there, as a Java executor would.
"""

from __future__ import annotations

import base64
import json
import os
import urllib.parse
from dataclasses import dataclass

from magnetar.client import (
    Authentication,
    AuthenticationBasic,
    AuthenticationTLS,
    AuthenticationToken,
)

# The plugin class names of the official clients (any package), and short names.
_PLUGINS = {
    "authenticationtoken": "token", "token": "token",
    "authenticationtls": "tls", "tls": "tls",
    "authenticationbasic": "basic", "basic": "basic",
}


def plugin_kind(class_name: str) -> str:
    """``token``, ``tls`` or ``basic`` for a plugin class name; ValueError otherwise."""
    short = class_name.strip().rsplit(".", 1)[-1].lower()
    kind = _PLUGINS.get(short)
    if kind is None:
        raise ValueError(
            f"pulsar.client.authPluginClassName {class_name!r} is not supported: use "
            "org.apache.pulsar.client.impl.auth.AuthenticationToken, AuthenticationTls "
            "or AuthenticationBasic"
        )
    return kind


def resolve_token(params: str) -> str:
    """The token a token parameter stands for, read now (files and variables too)."""
    text = params.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"authParams is not valid JSON: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("token"), str):
            raise ValueError('JSON authParams for a token must be {"token": "..."}')
        return resolve_token(data["token"])
    scheme, _, rest = text.partition(":")
    if scheme == "token":
        return rest.strip()
    if scheme == "file":
        path = urllib.parse.urlparse(text).path if rest.startswith("//") else rest
        try:
            with open(urllib.parse.unquote(path), encoding="utf-8") as f:
                return f.read().strip()
        except OSError as exc:
            raise ValueError(f"cannot read the token file of authParams {text!r}: {exc}") \
                from None
    if scheme == "data":
        meta, comma, payload = rest.partition(",")
        if not comma:
            raise ValueError("a data: authParams needs a ',' before the token")
        if meta.endswith(";base64"):
            try:
                return base64.b64decode(payload, validate=True).decode().strip()
            except ValueError as exc:
                raise ValueError(f"the base64 of a data: authParams is invalid: {exc}") \
                    from None
        return urllib.parse.unquote(payload).strip()
    if scheme == "env":
        value = os.environ.get(rest)
        if value is None:
            raise ValueError(f"authParams names the environment variable {rest!r}, "
                             "which is not set")
        return value.strip()
    return text


def _pairs(params: str) -> dict[str, str]:
    """``k1:v1,k2:v2`` or JSON, as the official clients parse plugin parameters."""
    text = params.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"authParams is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError("JSON authParams must be an object")
        return {str(k): str(v) for k, v in data.items()}
    out = {}
    for item in text.split(","):
        key, colon, value = item.partition(":")
        if not colon:
            raise ValueError(f"authParams item {item!r} is not key:value")
        out[key.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class AuthSpec:
    """The authentication the options ask for: ``kind`` and its raw parameters."""

    kind: str
    params: str

    @classmethod
    def from_options(cls, plugin: str, params: str) -> AuthSpec | None:
        if not plugin and not params:
            return None
        if not plugin:
            raise ValueError("pulsar.client.authParams needs pulsar.client.authPluginClassName "
                             "(e.g. org.apache.pulsar.client.impl.auth.AuthenticationToken)")
        spec = cls(plugin_kind(plugin), params)
        spec.provider()  # a mistake shows on the driver, not in every task
        return spec

    def provider(self) -> Authentication:
        if self.kind == "token":
            if not self.params.strip():
                raise ValueError("token authentication needs 'pulsar.client.authParams'")
            first = resolve_token(self.params)
            if not first:
                raise ValueError("the token of 'pulsar.client.authParams' is empty")
            text = self.params.strip()
            if text.startswith(("file:", "env:")):
                params = self.params
                return AuthenticationToken(lambda: resolve_token(params))  # re-read
            return AuthenticationToken(first)
        if self.kind == "tls":
            pairs = _pairs(self.params)
            if not {"tlsCertFile", "tlsKeyFile"} <= pairs.keys():
                raise ValueError("TLS authentication needs authParams "
                                 "tlsCertFile:<path>,tlsKeyFile:<path>")
            return AuthenticationTLS(pairs["tlsCertFile"], pairs["tlsKeyFile"])
        text = self.params.strip()
        if text.startswith("{"):
            pairs = _pairs(text)
            if not {"userId", "password"} <= pairs.keys():
                raise ValueError('basic authentication needs authParams '
                                 '{"userId": "...", "password": "..."}')
            return AuthenticationBasic(pairs["userId"], pairs["password"])
        user, colon, password = text.partition(":")
        if not colon:
            raise ValueError('basic authentication needs authParams '
                             '{"userId": "...", "password": "..."}')
        return AuthenticationBasic(user, password)
