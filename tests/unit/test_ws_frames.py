"""The listener's own text-frame writer, read back by wsproto's client: every length form
(7-bit, 16-bit, 64-bit) arrives whole, as text, in order."""

from __future__ import annotations

import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Request, TextMessage

from threadline.remote.coalesce import text_frame


def _client_after_handshake() -> WSConnection:
    client = WSConnection(ConnectionType.CLIENT)
    server = WSConnection(ConnectionType.SERVER)
    server.receive_data(client.send(Request(host="localhost", target="/")))
    request = next(e for e in server.events() if isinstance(e, Request))
    client.receive_data(server.send(AcceptConnection()))
    assert request.target == "/"
    assert any(isinstance(e, AcceptConnection) for e in client.events())
    return client


@pytest.mark.parametrize("size", [0, 2, 125, 126, 127, 65535, 65536, 70_000])
def test_text_frames_parse_as_whole_text_messages(size: int) -> None:
    client = _client_after_handshake()
    inner = max(size - 2, 0)  # a JSON string of exactly `size` bytes, mostly 2-byte chars
    payload = ('"' + "é" * (inner // 2) + "a" * (inner % 2) + '"').encode()[:size] or b""
    assert len(payload) == size
    client.receive_data(text_frame(payload) + text_frame(b'{"after":1}'))
    texts = [e for e in client.events() if isinstance(e, TextMessage)]
    assert [t.data for t in texts] == [payload.decode(), '{"after":1}']
    assert all(t.message_finished for t in texts)
