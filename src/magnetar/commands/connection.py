"""Where a client command finds its broker and credentials, as Pulsar's tools do.

Each setting is taken from the first of: its flag; a ``MAGNETAR_*`` environment
variable (``MAGNETAR_SERVICE_URL``, ``MAGNETAR_ADMIN_URL``, ``MAGNETAR_TOKEN``,
``MAGNETAR_AUTH_PLUGIN``, ``MAGNETAR_AUTH_PARAMS``); a Pulsar ``client.conf``
(``--conf FILE``, else the file ``PULSAR_CLIENT_CONF`` names: ``brokerServiceUrl``,
``webServiceUrl``, ``authPlugin``, ``authParams``); the default. A token is written
as Pulsar writes one: ``token:XXX``, ``file:///path``, ``data:;base64,XXX``,
``env:VAR``, or the token itself. A problem with any of them is a :class:`CliError`
(one line, exit code 2).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    from magnetar.client.transport.auth import Authentication
    from magnetar.commands.rest import RestClient

DEFAULT_SERVICE_URL = "pulsar://127.0.0.1:6650"
DEFAULT_ADMIN_URL = "http://127.0.0.1:8080"


class CliError(Exception):
    """A failure the command reports as one line on stderr, ending with ``code``."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def add_connection_options(parser: argparse.ArgumentParser, *, service: bool = False,
                           admin: bool = False, short: bool = False) -> None:
    """The connection flags. Their default is "not given" (absent from the namespace),
    so a command's parsers at every level can take them: ``magnetar admin topics list
    ns --admin-url URL`` as well as ``magnetar admin --admin-url URL topics list ns``.
    ``short`` adds pulsar-perf's ``-u`` and ``-cf``."""
    hidden = argparse.SUPPRESS
    conf = ["--conf", "--conf-file"] + (["-cf"] if short else [])
    parser.add_argument(*conf, dest="conf", default=hidden, metavar="FILE",
                        help="a Pulsar client.conf (default: $PULSAR_CLIENT_CONF)")
    if service:
        names = ["--service-url", "--url"] + (["-u"] if short else [])
        parser.add_argument(*names, dest="service_url", default=hidden, metavar="URL",
                            help="the broker's service URL, pulsar:// or http:// "
                            f"(default: $MAGNETAR_SERVICE_URL, brokerServiceUrl, "
                            f"{DEFAULT_SERVICE_URL})")
    if admin:
        parser.add_argument("--admin-url", "--web-service-url", dest="admin_url",
                            default=hidden, metavar="URL",
                            help="the broker's admin URL (default: $MAGNETAR_ADMIN_URL, "
                            f"webServiceUrl, {DEFAULT_ADMIN_URL})")
    parser.add_argument("--token", default=hidden,
                        help="a token: the token itself, token:T, file:///path, "
                        "data:;base64,B64 or env:VAR (default: $MAGNETAR_TOKEN)")
    parser.add_argument("--auth-plugin", dest="auth_plugin", default=hidden,
                        help="Pulsar's authPlugin: AuthenticationToken, AuthenticationBasic "
                        "or AuthenticationTls (class name or token/basic/tls)")
    parser.add_argument("--auth-params", dest="auth_params", default=hidden,
                        help="Pulsar's authParams for --auth-plugin")


def read_client_conf(path: Path) -> dict[str, str]:
    """A Java properties file as Pulsar's tools read ``client.conf``: ``key=value``,
    ``key: value`` or ``key value`` lines, ``#``/``!`` comments, ``\\`` continuations."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot read the client configuration {path}: "
                       f"{exc.strerror or exc}") from None
    values: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        cut = next((i for i, c in enumerate(line) if c in "=: \t"), len(line))
        rest = line[cut:].lstrip()
        if rest[:1] in ("=", ":"):
            rest = rest[1:]
        values[line[:cut]] = rest.strip()
    return values


@dataclass(frozen=True)
class Settings:
    """What the flags, the environment and the client.conf say, in that order."""

    args: argparse.Namespace
    env: Mapping[str, str]
    conf: Mapping[str, str]

    @classmethod
    def of(cls, args: argparse.Namespace, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        path = getattr(args, "conf", None) or env.get("PULSAR_CLIENT_CONF")
        return cls(args, env, read_client_conf(Path(path)) if path else {})

    def pick(self, attr: str, env_key: str, conf_key: str, default: str) -> str:
        return (getattr(self.args, attr, None) or self.env.get(env_key)
                or self.conf.get(conf_key) or default)

    def service_url(self) -> str:
        return self.pick("service_url", "MAGNETAR_SERVICE_URL", "brokerServiceUrl",
                         DEFAULT_SERVICE_URL)

    def admin_url(self) -> str:
        return self.pick("admin_url", "MAGNETAR_ADMIN_URL", "webServiceUrl",
                         DEFAULT_ADMIN_URL)

    def rest_client(self, url: str | None = None) -> RestClient:
        """A REST client for ``url`` (default: the admin URL) with these credentials."""
        from magnetar.commands.rest import RestClient

        creds = self.credentials()
        return RestClient(url or self.admin_url(), authorization=creds.authorization(),
                          ssl_context=creds.ssl_context())

    def binary_url(self, topic: str) -> str:
        """The service URL for magnetar's client: an ``http(s)://`` one (which the
        official clients take, looking topics up over HTTP) is replaced by the
        ``pulsar://`` URL the broker's HTTP lookup answers for ``topic``."""
        url = self.service_url()
        if not url.startswith(("http://", "https://")):
            return url
        from magnetar.commands.rest import AdminError

        path = "/lookup/v2/topic" + topic_path(topic)
        try:
            answer = self.rest_client(url).call("GET", path).json()
        except AdminError as exc:
            raise CliError(f"HTTP lookup of {topic} at {url} failed: {exc}", 1) from None
        key = "brokerUrlTls" if url.startswith("https://") else "brokerUrl"
        found = answer.get(key) or answer.get("brokerUrl") if isinstance(answer, dict) else None
        if not isinstance(found, str) or not found:
            raise CliError(f"HTTP lookup of {topic} at {url} gave no broker URL", 1)
        return found

    def credentials(self) -> Credentials:
        layers = [
            (getattr(self.args, "token", None), getattr(self.args, "auth_plugin", None),
             getattr(self.args, "auth_params", None)),
            (self.env.get("MAGNETAR_TOKEN"), self.env.get("MAGNETAR_AUTH_PLUGIN"),
             self.env.get("MAGNETAR_AUTH_PARAMS")),
            (None, self.conf.get("authPlugin"), self.conf.get("authParams")),
        ]
        for token, plugin, params in layers:
            if token:
                return Credentials(token=token_value(token))
            if plugin:
                return credentials_of(plugin, params or "")
        return Credentials()


def topic_path(name: str) -> str:
    """``/{domain}/{tenant}/{namespace}/{topic}`` of a full or short topic name; a name
    Pulsar would refuse is a CliError (exit code 2)."""
    from urllib.parse import quote

    from magnetar.protocol.topic_name import InvalidTopicName, TopicName

    try:
        parsed = TopicName.parse(name)
    except InvalidTopicName as exc:
        raise CliError(str(exc)) from None
    return (f"/{parsed.domain}/{quote(parsed.tenant)}/{quote(parsed.namespace)}/"
            f"{quote(parsed.local, safe='')}")


def token_value(text: str) -> str:
    """The token that ``token:``, ``file:``, ``data:`` or ``env:`` forms name."""
    if text.startswith("token:"):
        return text[len("token:"):].strip()
    if text.startswith("file:"):
        parts = urlsplit(text)
        path = unquote(parts.path) if parts.netloc in ("", "localhost") else text[5:]
        try:
            return Path(path).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise CliError(f"cannot read the token file {path}: {exc.strerror or exc}") from None
    if text.startswith("data:"):
        meta, _, data = text[5:].partition(",")
        if meta.endswith(";base64"):
            try:
                return base64.b64decode(data, validate=True).decode().strip()
            except (ValueError, UnicodeDecodeError):
                raise CliError("the data: token is not valid base64") from None
        return unquote(data).strip()
    if text.startswith("env:"):
        name = text[4:]
        if name not in os.environ:
            raise CliError(f"the token's environment variable {name} is not set")
        return os.environ[name].strip()
    return text.strip()


def _params(text: str) -> dict[str, str]:
    """authParams as JSON (``{"userId": "u", ...}``) or ``key:value,key:value``."""
    text = text.strip()
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            raise CliError(f"authParams {text[:40]!r} is not valid JSON") from None
        return {str(k): str(v) for k, v in doc.items()} if isinstance(doc, dict) else {}
    pairs = (item.split(":", 1) for item in text.split(",") if ":" in item)
    return {k.strip(): v.strip() for k, v in pairs}


def credentials_of(plugin: str, params: str) -> Credentials:
    kind = plugin.rsplit(".", 1)[-1].lower().removeprefix("authentication")
    if kind == "token":
        if params.strip().startswith("{"):
            return Credentials(token=token_value(_params(params).get("token", "")))
        return Credentials(token=token_value(params))
    if kind == "basic":
        values = _params(params)
        if "userId" not in values or "password" not in values:
            raise CliError("AuthenticationBasic needs authParams with userId and password")
        return Credentials(username=values["userId"], password=values["password"])
    if kind == "tls":
        values = _params(params)
        if "tlsCertFile" not in values or "tlsKeyFile" not in values:
            raise CliError("AuthenticationTls needs authParams with tlsCertFile and tlsKeyFile")
        return Credentials(cert_file=values["tlsCertFile"], key_file=values["tlsKeyFile"])
    raise CliError(f"authPlugin {plugin!r} is not supported "
                   "(AuthenticationToken, AuthenticationBasic, AuthenticationTls are)")


@dataclass(frozen=True)
class Credentials:
    token: str | None = None
    username: str | None = None
    password: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    def client_auth(self) -> Authentication | None:
        from magnetar.client.transport.auth import (
            AuthenticationBasic,
            AuthenticationTLS,
            AuthenticationToken,
        )

        if self.token is not None:
            return AuthenticationToken(self.token)
        if self.username is not None and self.password is not None:
            return AuthenticationBasic(self.username, self.password)
        if self.cert_file and self.key_file:
            return AuthenticationTLS(self.cert_file, self.key_file)
        return None

    def authorization(self) -> str | None:
        """The HTTP Authorization header of these credentials (none for TLS)."""
        if self.token is not None:
            return f"Bearer {self.token}"
        if self.username is not None:
            pair = f"{self.username}:{self.password}".encode()
            return "Basic " + base64.b64encode(pair).decode()
        return None

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client certificate for an https admin URL."""
        if not (self.cert_file and self.key_file):
            return None
        context = ssl.create_default_context()
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise CliError(f"cannot load the TLS certificate {self.cert_file}: {exc}") from None
        return context
