"""Opens N TLS 1.3 connections to 127.0.0.1:PORT, sends one signed GitHub POST on each
(HTTP/1.1, or HTTP/2 with a hand-made minimal framing), reads the answer (a 202 for
HTTP/1.1; a response for HTTP/2), and keeps
every connection open and idle. Prints "open N answered A" once they all are, answers
HTTP/2 PINGs meanwhile, and closes everything when a line arrives on stdin.

    idle_client.py N PORT h1|h2 BODIES

BODIES holds "signature<TAB>body" lines (lib.sh's bench_bodies): connection i sends
line i, a distinct delivery.
"""

import os
import selectors
import socket
import ssl
import struct
import sys
import time

n, port, protocol, bodies = sys.argv[1:5]
n, port = int(n), int(port)
with open(bodies, "rb") as lines:
    pool = [line.rstrip(b"\n").split(b"\t", 1) for line in lines]

context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
context.check_hostname = False
context.verify_mode = ssl.CERT_NONE
context.minimum_version = ssl.TLSVersion.TLSv1_3
context.set_alpn_protocols(["h2"] if protocol == "h2" else ["http/1.1"])

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, SETTINGS, PING, GOAWAY, RST_STREAM = 0, 1, 4, 6, 7, 3
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def literal(name, value):
    """An HPACK literal header field without indexing, new name, no Huffman coding."""
    name, value = name.encode(), value.encode()
    assert len(name) < 127 and len(value) < 127
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def headers(delivery, signature, body):
    return {
        "content-type": "application/json",
        "x-github-event": "push",
        "x-github-delivery": delivery,
        "x-hub-signature-256": signature.decode(),
        "content-length": str(len(body)),
    }


def post_h1(tls, delivery, signature, body):
    head = "POST /hooks/github HTTP/1.1\r\nhost: localhost\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers(delivery, signature, body).items()) + "\r\n"
    tls.sendall(head.encode() + body)
    return tls.recv(4096).startswith(b"HTTP/1.1 202")


def read_frame(tls, buffer):
    while len(buffer) < 9 or len(buffer) < 9 + int.from_bytes(buffer[:3], "big"):
        chunk = tls.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buffer += chunk
    length = int.from_bytes(buffer[:3], "big")
    kind, flags, stream = buffer[3], buffer[4], struct.unpack(">I", buffer[5:9])[0] & 0x7FFFFFFF
    payload = bytes(buffer[9 : 9 + length])
    del buffer[: 9 + length]
    return kind, flags, stream, payload


def post_h2(tls, delivery, signature, body):
    block = b"".join(
        literal(k, v)
        for k, v in [(":method", "POST"), (":scheme", "https"), (":authority", "localhost"), (":path", "/hooks/github")]
        + list(headers(delivery, signature, body).items())
    )
    tls.sendall(
        H2_PREFACE
        + frame(SETTINGS, 0, 0)
        + frame(HEADERS, END_HEADERS, 1, block)
        + frame(DATA, END_STREAM, 1, body)
    )
    buffer = bytearray()
    while True:
        kind, flags, stream, payload = read_frame(tls, buffer)
        if kind == SETTINGS and not flags & ACK:
            tls.sendall(frame(SETTINGS, ACK, 0))
        elif kind in (GOAWAY, RST_STREAM):
            return False
        elif kind == HEADERS and stream == 1:
            # The status is HPACK-coded (often Huffman): the bench checks the edge's
            # stored count instead.
            return True


connections = []
answered = 0
for i in range(n):
    tls = context.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost")
    delivery = f"idle-{protocol}-{port}-{i}-{time.time_ns()}"
    signature, body = pool[(i + (n if protocol == "h2" else 0)) % len(pool)]
    post = post_h2 if protocol == "h2" else post_h1
    answered += post(tls, delivery, signature, body)
    connections.append(tls)
print(f"open {len(connections)} answered {answered}", flush=True)

events = selectors.DefaultSelector()
events.register(sys.stdin, selectors.EVENT_READ)
if protocol == "h2":
    for tls in connections:
        tls.setblocking(False)
        events.register(tls, selectors.EVENT_READ, bytearray())
while True:
    for key, _ in events.select(timeout=1):
        if key.fileobj is sys.stdin:
            os._exit(0)
        tls, buffer = key.fileobj, key.data
        try:
            buffer += tls.recv(65536)
        except (ssl.SSLWantReadError, BlockingIOError):
            continue
        except OSError:
            events.unregister(tls)
            continue
        while len(buffer) >= 9 and len(buffer) >= 9 + int.from_bytes(buffer[:3], "big"):
            kind, flags, _, payload = read_frame(tls, buffer)
            if kind == PING and not flags & ACK:
                tls.sendall(frame(PING, ACK, 0, payload))
