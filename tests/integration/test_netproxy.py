"""The chaos proxy forwards, blackholes and resets a link on command."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

from kraft.local.cluster import free_ports
from tests.integration.netproxy import NetProxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture
def proxied() -> Iterator[tuple[NetProxy, int]]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    (listen,) = free_ports(1)
    proxy = NetProxy()
    proxy.add("a->b", listen, server.server_address[1])
    try:
        yield proxy, listen
    finally:
        proxy.close()
        server.shutdown()
        server.server_close()


def _roundtrip(port: int, payload: bytes, timeout: float = 1.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(payload)
        out = b""
        while len(out) < len(payload):
            chunk = s.recv(4096)
            if not chunk:
                break
            out += chunk
        return out


def test_pass_blackhole_reset_and_heal(proxied: tuple[NetProxy, int]) -> None:
    proxy, port = proxied
    assert _roundtrip(port, b"hello") == b"hello"
    proxy.set_mode("a->b", "blackhole")
    with pytest.raises(TimeoutError):
        _roundtrip(port, b"lost", timeout=0.3)
    proxy.set_mode("a->b", "reset")
    with pytest.raises(OSError):
        out = _roundtrip(port, b"refused", timeout=1.0)
        if not out:  # closed at once: the peer saw a reset or EOF
            raise ConnectionResetError
    proxy.heal_all()
    assert _roundtrip(port, b"again") == b"again"
    assert proxy.links["a->b"].bytes_forwarded >= 2 * len(b"hello")


def test_unknown_mode_is_refused(proxied: tuple[NetProxy, int]) -> None:
    proxy, _ = proxied
    with pytest.raises(ValueError, match="unknown link mode"):
        proxy.set_mode("a->b", "sideways")
