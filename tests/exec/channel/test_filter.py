"""The listener's kernel filter (exec/channel/filter.py) on a real socket: job hosts connect, others get no answer."""
import socket

import pytest

from mpirun_kit.exec.channel import filter as peer_filter


def test_only_the_listed_addresses_complete_a_handshake():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        assert peer_filter.attach(listener, ["127.0.0.1"]) == ""
        listener.listen()
        port = listener.getsockname()[1]
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        with socket.socket() as outsider:
            outsider.bind(("127.0.0.2", 0))
            outsider.settimeout(0.5)
            with pytest.raises(socket.timeout):
                outsider.connect(("127.0.0.1", port))


def test_what_cannot_be_filtered_is_said():
    with socket.socket() as s:
        assert peer_filter.attach(s, ["::1"]) == "no kernel filter: not IPv4 addresses: ['::1']"
    with pytest.raises(ValueError, match="2001 addresses; a filter holds at most 2000"):
        peer_filter.program([f"10.0.{i // 256}.{i % 256}" for i in range(2001)])
