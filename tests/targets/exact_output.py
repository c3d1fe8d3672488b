"""A program that prints every kind of text a rank prints, and what each target must show for it.

Written in pieces (one ``os.write`` each, with pauses) by every rank at once, so the launcher's per-write
tags land inside lines and other ranks' writes land between a line's pieces (issue 16 defect 1).
"""
from __future__ import annotations

PROGRAM = """\
import os, sys, time
r = int(os.environ["OMPI_COMM_WORLD_RANK"])
pieces = [b"    indented %d\\n" % r, b"a", b" b ", b" c\\t", b"%d" % r, b" d\\n", b"\\ttab\\t\\n", b"trail   \\n",
          b"\\n", b" \\n", b"\\xff\\xfe bin \\x00 %d\\r\\n" % r, b"l1\\nl2\\n"]
pieces += [b"w%d-%d " % (r, i) for i in range(12)] + [b"\\n"]
for p in pieces:
    os.write(1, p)
    time.sleep(0.01)
os.write(2, b"  err %d  \\n" % r)
os.write(1, b"no newline %d" % r)
"""


def expected_lines(rank: int, host: str) -> list[bytes]:
    """Rank ``rank``'s stdout lines as the user must see them: ``[rank host] `` and the bytes it wrote."""
    text = [b"    indented %d" % rank, b"a b  c\t%d d" % rank, b"\ttab\t", b"trail   ", b"", b" ",
            b"\xff\xfe bin \x00 %d\r" % rank, b"l1", b"l2",
            b" ".join(b"w%d-%d" % (rank, i) for i in range(12)) + b" ", b"no newline %d" % rank]
    return [f"[{rank} {host}] ".encode() + t for t in text]


def stderr_line(rank: int, host: str) -> bytes:
    return f"[{rank} {host}]   err {rank}  ".encode()


def assert_exact(stdout: bytes, stderr: bytes, placement: dict[int, str]) -> None:
    """Every rank's lines, in its own order, exactly; its stderr line in ``stderr``."""
    out, err = stdout.split(b"\n"), stderr.split(b"\n")
    for rank, host in placement.items():
        prefix = f"[{rank} {host}] ".encode()
        # (the stderr line is left out: where a target merges the streams it lands among the stdout lines)
        mine = [line for line in out if line.startswith(prefix) and line != stderr_line(rank, host)]
        assert mine == expected_lines(rank, host)
        assert stderr_line(rank, host) in err
