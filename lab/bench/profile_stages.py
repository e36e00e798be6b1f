"""Charges each `perf script -F ip,sym` sample (a stack, leaf first) to the first frame
from the leaf that names a stage, and prints each stage's share of the samples and its
microseconds per request (share x the edge's CPU time / requests). A frame is judged by
its path alone, not its type parameters (`poll<edge::http::…>` names no stage). Copies
(memcpy), drops, spin locks and inlined async blocks name no stage, so they are charged
to their caller's."""

import argparse
import re
import sys

# Checked per frame, in this order; the first stage whose pattern matches the frame wins.
STAGES = [
    ("fdatasync (syscall, device flush)", r"fdatasync|ext4_sync_file|jbd2|iowrite16|blk_|file_write_and_wait"),
    ("spool write (pwrite)", r"pwrite|ext4_file_write|ext4_buffered_write|generic_perform_write"),
    ("spool append (frame, de-dup ids)", r"^edge::spool::|sip::Hasher"),
    ("allocator (malloc/free)", r"malloc|cfree|_int_free|_int_realloc|tcache|unlink_chunk|^free$|realloc"),
    ("HMAC verify", r"^(sha2|hmac)::|^edge::verify::"),
    ("TLS records (AES-GCM, rustls)", r"aws_lc|aes_|_aesni|gcm|ghash|^rustls::|^edge::tls::"),
    ("HTTP parse/encode (hyper)", r"^(hyper|httparse|http|hyper_util)::|^edge::http::"),
    ("TCP send/recv (kernel, loopback)", r"tcp_|__sys_sendto|__sys_recvfrom|sock_|inet_|ip_|__dev_queue|net_rx|skb|__x64_sys_(sendto|recvfrom)"),
    # The request handler is inlined into the poll of the timeout around it: its own
    # work, not the scheduler's.
    ("edge request handling (other)", r"^tokio::time::timeout::Timeout$"),
    ("wake-ups, hand-offs, scheduler", r"futex|schedule|finish_task_switch|try_to_wake_up|epoll|^tokio::|^mio::|syscall|switch_fpu"),
    ("edge request handling (other)", r"^edge::"),
]
OTHER = "other"


def main():
    args = argparse.ArgumentParser()
    args.add_argument("--cpu-us", type=float, required=True)
    args.add_argument("--requests", type=float, required=True)
    opts = args.parse_args()
    rules = [(name, re.compile(pattern)) for name, pattern in STAGES]
    counts = {name: 0 for name, _ in STAGES}
    counts[OTHER] = 0
    total = 0
    for stack in read_stacks(sys.stdin):
        total += 1
        counts[stage_of(stack, rules)] += 1
    if total == 0:
        sys.exit("no samples")
    per_request = opts.cpu_us / opts.requests
    print(f"{total} samples, {per_request:.1f} µs of edge CPU per request")
    print("| stage | share | µs per request |")
    print("| --- | --- | --- |")
    for name, count in sorted(counts.items(), key=lambda item: -item[1]):
        share = count / total
        print(f"| {name} | {share * 100:.1f} % | {share * per_request:.1f} |")


def read_stacks(lines):
    stack = []
    for line in lines:
        line = line.strip()
        if not line:
            if stack:
                yield stack
            stack = []
            continue
        parts = line.split(None, 1)
        if len(parts) == 2:
            stack.append(parts[1])
    if stack:
        yield stack


def stage_of(stack, rules):
    for frame in stack:
        path = path_of(frame)
        for name, pattern in rules:
            if pattern.search(path):
                return name
    return OTHER


def path_of(frame):
    """`<a::B<T> as c::D>::f` -> `a::B`; `a::f<T>` -> `a::f`."""
    if frame.startswith("<"):
        return re.split(r" as |<|>", frame[1:], maxsplit=1)[0]
    return frame.split("<", 1)[0]


if __name__ == "__main__":
    main()
