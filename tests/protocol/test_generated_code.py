"""The checked-in protobuf code is what ``make proto`` produces from proto/ today."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_code_is_up_to_date(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("genproto", ROOT / "scripts" / "genproto.py")
    assert spec is not None and spec.loader is not None
    genproto = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(genproto)
    genproto.generate(tmp_path)
    checked_in = ROOT / "src" / "magnetar" / "protocol" / "generated"
    for name in ("magnetar_pulsar_pb2.py", "magnetar_pulsar_pb2.pyi"):
        assert (tmp_path / name).read_text() == (checked_in / name).read_text(), (
            f"{name} is stale: run `make proto` and commit the result"
        )


def test_pip371_numbers_are_the_public_contract() -> None:
    from magnetar.protocol.pb import pb

    ack = pb.CommandAck.DESCRIPTOR.fields_by_name
    assert ack["reply_to_client"].number == 9
    assert ack["reply_is_error"].number == 1000
    assert pb.BaseCommand.REQUEST_RECEIPT == 69
    assert pb.BaseCommand.DESCRIPTOR.fields_by_name["requestReceipt"].number == 69
    receipt = pb.CommandRequestReceipt.DESCRIPTOR.fields_by_name
    assert receipt["reply_to_producer_id"].number == 1
    assert receipt["request_message_id"].number == 2
    assert receipt["is_error"].number == 3
    assert pb.FeatureFlags.DESCRIPTOR.fields_by_name["supports_request_reply"].number == 1000
