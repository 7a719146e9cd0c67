"""A TCP proxy on 127.0.0.1 that loses Kafka Produce answers, for the retry tests.

Each client connection gets its own connection to the target and two pump threads. The
proxy reads both directions as Kafka frames (4-byte big-endian length, then the body):
requests name their API key and correlation id, so it knows which answers belong to
Produce requests. While `faults` is on, it does, at random (seeded):

- forward a Produce request whole, then cut the connection: the node stores the batch,
  the client never hears of it and sends it again;
- drop a Produce answer and cut;
- forward half of a Produce answer and cut.

Everything else passes unchanged. `stats` counts what it did. Bounded: every socket has a
timeout, the pumps end with their connection, and closing the proxy closes every socket.
"""

import random
import socket
import struct
import threading

PRODUCE = 0
SOCKET_TIMEOUT_S = 120
REQUEST_HEADER_BYTES = 8  # api key, api version, correlation id
RESPONSE_HEADER_BYTES = 4  # correlation id


class ChaosProxy:
    def __init__(self, seed, cut_after_request=0.03, drop_answer=0.03, cut_mid_answer=0.02):
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.p_cut_after_request = cut_after_request
        self.p_drop_answer = drop_answer
        self.p_cut_mid_answer = cut_mid_answer
        self.target = None
        self.faults = False
        self.stats = {"connections": 0, "produce_requests": 0, "lost_answers": 0,
                      "cut_after_request": 0, "dropped_answers": 0, "cut_mid_answer": 0}
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.sockets = []
        self.closed = False
        self.acceptor = threading.Thread(target=self.accept_loop, daemon=True)

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def __enter__(self):
        self.acceptor.start()
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.closed = True
        self.listener.close()
        with self.lock:
            sockets, self.sockets = self.sockets, []
        for s in sockets:
            shut(s)
        self.acceptor.join(10)

    def chance(self, p):
        with self.lock:
            return self.faults and self.random.random() < p

    def count(self, key):
        with self.lock:
            self.stats[key] += 1

    def accept_loop(self):
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=10)
            except OSError:
                shut(client)
                continue
            for s in (client, server):
                s.settimeout(SOCKET_TIMEOUT_S)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.sockets += [client, server]
                self.stats["connections"] += 1
            conn = Connection(self, client, server)
            threading.Thread(target=conn.requests, daemon=True).start()
            threading.Thread(target=conn.answers, daemon=True).start()


class Connection:
    def __init__(self, proxy, client, server):
        self.proxy = proxy
        self.client = client
        self.server = server
        self.produce_ids = set()
        self.lock = threading.Lock()

    def cut(self):
        shut(self.client)
        shut(self.server)

    def requests(self):
        """Client to node."""
        try:
            while True:
                frame = read_frame(self.client, REQUEST_HEADER_BYTES)
                if frame is None:
                    break
                api_key, _version, correlation_id = struct.unpack(">hhi", frame[4:12])
                if api_key == PRODUCE:
                    with self.lock:
                        self.produce_ids.add(correlation_id)
                    self.proxy.count("produce_requests")
                self.server.sendall(frame)
                if api_key == PRODUCE and self.proxy.chance(self.proxy.p_cut_after_request):
                    self.proxy.count("cut_after_request")
                    self.proxy.count("lost_answers")
                    break
        except OSError:
            pass
        self.cut()

    def answers(self):
        """Node to client."""
        try:
            while True:
                frame = read_frame(self.server, RESPONSE_HEADER_BYTES)
                if frame is None:
                    break
                (correlation_id,) = struct.unpack(">i", frame[4:8])
                with self.lock:
                    produce = correlation_id in self.produce_ids
                    self.produce_ids.discard(correlation_id)
                if produce and self.proxy.chance(self.proxy.p_drop_answer):
                    self.proxy.count("dropped_answers")
                    self.proxy.count("lost_answers")
                    break
                if produce and self.proxy.chance(self.proxy.p_cut_mid_answer):
                    self.client.sendall(frame[: len(frame) // 2])
                    self.proxy.count("cut_mid_answer")
                    self.proxy.count("lost_answers")
                    break
                self.client.sendall(frame)
        except OSError:
            pass
        self.cut()


def read_exactly(sock, count):
    out = bytearray()
    while len(out) < count:
        chunk = sock.recv(count - len(out))
        if not chunk:
            return None
        out += chunk
    return bytes(out)


def read_frame(sock, header_bytes):
    """One whole frame, length prefix included; None when the peer closed (or sent a frame
    too short for its header)."""
    head = read_exactly(sock, 4)
    if head is None:
        return None
    (length,) = struct.unpack(">i", head)
    if length < header_bytes or length > 256 << 20:
        return None
    body = read_exactly(sock, length)
    return None if body is None else head + body


def shut(sock):
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
