"""``magnetar tokens``: make keys and JWT tokens for token authentication, as
``pulsar tokens`` does (the same files: a raw secret key, DER key pairs; the same
flags where it has them).

    magnetar tokens create-secret-key --output my-secret.key
    magnetar tokens create --secret-key file:///path/my-secret.key --subject alice
    magnetar serve --authentication-enabled true --token-secret-key file:///path/my-secret.key
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from magnetar.broker.auth.providers import AuthenticationFailed, SettingError, read_url_setting

if TYPE_CHECKING:
    from types import ModuleType


def _tokens() -> ModuleType:
    # Imported on use: PyJWT with cryptography costs 11 MB of RSS, and this module is
    # imported by every `magnetar` command, `serve` included.
    from magnetar.broker.auth import tokens

    return tokens


def add_tokens_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    tokens = commands.add_parser(
        "tokens",
        help="make keys and tokens for token authentication (like pulsar tokens)",
        description=(
            "Keys and JWT tokens for token authentication. A broker checks tokens with "
            "--token-secret-key (HS256) or --token-public-key (RS256/ES256), given as "
            "file:///path or data:;base64,..."
        ),
    )
    sub = tokens.add_subparsers(dest="tokens_command", required=True)

    secret = sub.add_parser("create-secret-key", help="a new random secret key (HS256)")
    secret.add_argument("-o", "--output", type=Path, help="write it to this file (raw bytes)")
    secret.add_argument("-b", "--base64", action="store_true", help="print it in base64")
    secret.add_argument(
        "-a", "--signature-algorithm", default="HS256", choices=("HS256", "HS384", "HS512")
    )

    pair = sub.add_parser("create-key-pair", help="a new private/public key pair (DER)")
    pair.add_argument("--output-private-key", type=Path, required=True)
    pair.add_argument("--output-public-key", type=Path, required=True)
    pair.add_argument(
        "-a", "--signature-algorithm", default="RS256",
        choices=("RS256", "RS384", "RS512", "ES256", "ES384", "ES512"),
    )

    create = sub.add_parser("create", help="a token for a role, signed with a key")
    create.add_argument("-s", "--subject", required=True, help="the role the token carries")
    key = create.add_mutually_exclusive_group(required=True)
    key.add_argument("-sk", "--secret-key", help="file:///path or data:;base64,... (HMAC)")
    key.add_argument("-pk", "--private-key", help="file:///path or data:;base64,... (RSA/EC)")
    create.add_argument(
        "-e", "--expiry-time", "--expiry",
        help="the token expires after this long: 30s, 10m, 12h, 7d, 2w, 1y (default: never)",
    )
    create.add_argument(
        "-a", "--signature-algorithm", help="default: HS256 with a secret key, else from the key"
    )
    create.add_argument("--claim", default="sub", help="the claim holding the role (sub)")

    show = sub.add_parser("show", help="print a token's header and claims (not verified)")
    given = show.add_mutually_exclusive_group(required=True)
    given.add_argument("-i", "--token", help="the token")
    given.add_argument("-f", "--token-file", type=Path, help="a file holding the token")

    validate = sub.add_parser("validate", help="check a token's signature and expiry")
    given = validate.add_mutually_exclusive_group(required=True)
    given.add_argument("-i", "--token", help="the token")
    given.add_argument("-f", "--token-file", type=Path, help="a file holding the token")
    key = validate.add_mutually_exclusive_group(required=True)
    key.add_argument("-sk", "--secret-key", help="file:///path or data:;base64,...")
    key.add_argument("-pk", "--public-key", help="file:///path or data:;base64,...")


def run_tokens(args: argparse.Namespace) -> int:
    try:
        return _COMMANDS[args.tokens_command](args)
    except (SettingError, ValueError, OSError) as exc:
        print(f"magnetar tokens: {exc}", file=sys.stderr)
        return 2


def _create_secret_key(args: argparse.Namespace) -> int:
    key = _tokens().create_secret_key(args.signature_algorithm)
    if args.output is not None:
        _write_private(args.output, key)
    if args.base64 or args.output is None:
        print(base64.b64encode(key).decode())
    return 0


def _create_key_pair(args: argparse.Namespace) -> int:
    private, public = _tokens().create_key_pair(args.signature_algorithm)
    _write_private(args.output_private_key, private)
    args.output_public_key.write_bytes(public)
    return 0


def _write_private(path: Path, data: bytes) -> None:
    path.touch(mode=0o600)  # never readable by others, even for a moment
    path.chmod(0o600)
    path.write_bytes(data)


def _create(args: argparse.Namespace) -> int:
    expires = _tokens().parse_duration(args.expiry_time) if args.expiry_time else None
    if args.secret_key:
        token = _tokens().create_token(
            args.subject, secret_key=read_url_setting(args.secret_key),
            algorithm=args.signature_algorithm, expires_in=expires, claim=args.claim,
        )
    else:
        private_key = _tokens().load_private_key(read_url_setting(args.private_key))
        token = _tokens().create_token(
            args.subject, private_key=private_key,
            algorithm=args.signature_algorithm, expires_in=expires, claim=args.claim,
        )
    print(token)
    return 0


def _token_of(args: argparse.Namespace) -> str:
    if args.token:
        return str(args.token).strip()
    return str(args.token_file.read_text()).strip()


def _show(args: argparse.Namespace) -> int:
    print(_tokens().show_token(_token_of(args)))
    return 0


def _validate(args: argparse.Namespace) -> int:
    provider = _tokens().TokenProvider.from_settings(args.secret_key, args.public_key)
    try:
        claims = provider.verify(_token_of(args))
    except AuthenticationFailed as exc:
        print(f"magnetar tokens: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(claims, separators=(",", ":")))
    return 0


_COMMANDS = {
    "create-secret-key": _create_secret_key,
    "create-key-pair": _create_key_pair,
    "create": _create,
    "show": _show,
    "validate": _validate,
}
