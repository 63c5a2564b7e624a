"""magnetar's client decoder and a MESSAGE frame over its limit: the stream is kept.

Such a frame (an entry stored before the broker judged whole frames) used to raise
FrameTooLarge: the client closed its connection, reconnected, and got the same entry
again, forever. The decoder now yields the frame's head (its command and the start of
its body, as a TruncatedBody) and drops the rest as it arrives; frames after it decode
as usual. Any other command over the limit still ends the stream.
"""

from __future__ import annotations

import pytest

from magnetar.protocol.client_codec import ClientFrameDecoder, TruncatedBody
from magnetar.protocol.errors import FrameTooLarge
from magnetar.protocol.fastpath import encode_message_frame, message_id_bytes
from magnetar.protocol.frames import build_entry, encode_command_with_body
from magnetar.protocol.pb import BaseCommand, pb

LIMIT = 4096


def message(entry_id: int, payload: bytes) -> tuple[bytes, bytes]:
    md = pb.MessageMetadata(producer_name="p", sequence_id=entry_id, publish_time=1)
    entry = build_entry(md.SerializeToString(), payload)
    return encode_message_frame(7, message_id_bytes(1, entry_id, -1), 0, entry), entry


@pytest.mark.parametrize("chunk", [1, 100, 4096, 1 << 20])
def test_an_oversized_message_is_cut_to_its_head_and_the_stream_goes_on(chunk: int) -> None:
    big, big_entry = message(1, b"x" * (3 * LIMIT))
    small, small_entry = message(2, b"after")
    stream = big + small
    decoder = ClientFrameDecoder(LIMIT)
    frames = []
    for start in range(0, len(stream), chunk):
        frames += decoder.feed(stream[start : start + chunk])
    assert [(c.type, c.message.message_id.entryId) for c, _ in frames] == [
        (BaseCommand.MESSAGE, 1), (BaseCommand.MESSAGE, 2)]
    head = frames[0][1]
    assert type(head) is TruncatedBody and big_entry.startswith(head)
    assert len(head) < LIMIT
    assert frames[1][1] == small_entry and type(frames[1][1]) is bytes
    assert decoder.buffered == 0

    # Any other command over the limit still ends the stream.
    receipt = BaseCommand(type=BaseCommand.REQUEST_RECEIPT,
                          requestReceipt=pb.CommandRequestReceipt(reply_to_producer_id=1))
    with pytest.raises(FrameTooLarge):
        decoder.feed(encode_command_with_body(receipt, b"r" * (2 * LIMIT)))
