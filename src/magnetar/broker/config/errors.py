"""ConfigError, the error every bad setting raises (it names the setting, the value and
why), and the errors of a listening socket the broker could not have."""

from __future__ import annotations

import os
import socket


class ConfigError(ValueError):
    """A setting has a value the broker cannot use: names the setting, the value, why."""

    def __init__(self, setting: str, value: object, reason: str, source: str = "") -> None:
        self.setting = setting
        self.value = value
        self.reason = reason
        self.source = source  # where the value came from (a file, an env variable), if known
        where = f" (from {source})" if source else ""
        super().__init__(f"{setting} = {_show(value)}{where}: {reason}")


def _show(value: object) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def os_reason(exc: OSError) -> str:
    """What went wrong, in the errno's own words (uvloop's messages repeat the address)."""
    if exc.errno and exc.errno > 0 and not isinstance(exc, socket.gaierror):
        return os.strerror(exc.errno)
    return exc.strerror or str(exc)


def listen_error(setting: str, host_setting: str, host: str, port: int,
                 exc: OSError) -> ConfigError:
    """The ConfigError for a listening socket that could not be had on host:port."""
    if isinstance(exc, socket.gaierror):
        return ConfigError(host_setting, host, f"cannot listen there: {os_reason(exc)}")
    return ConfigError(setting, port, f"cannot listen on {host}:{port}: {os_reason(exc)}")



def setting_help(text: str) -> dict[str, str]:
    """A field's metadata: its help text, which ``magnetar serve --help`` prints."""
    return {"help": text}
