"""Output pumping: every copy of a child's or a remote host's output goes through here.

* ``pump_tagged``: mpirun's output, each rank's lines rebuilt behind ``[rank host]``
  (``Retagger``), the last lines kept for the failure report (process.py);
* ``copy_prefixed``: a stream copied line by line, bytes unchanged, behind a prefix
  (the ssh target's remote sessions);
* ``FileTail``: a growing log file followed the same way (the sim target's hosts).

Bytes are never re-encoded on the way: a rank's output reaches the terminal as it wrote it.
"""
from __future__ import annotations

import collections
import re
import threading
from pathlib import Path
from typing import BinaryIO, Mapping


def retag(line: str, tag_re: re.Pattern, rank_hosts: Mapping[int, str]) -> str:
    """``[1,3]<stdout>:text`` -> ``[3 algo-2] text``; other lines unchanged."""
    m = tag_re.match(line)
    if not m:
        return line
    rank = int(m.group("rank"))
    return f"[{rank} {rank_hosts.get(rank, '?')}] {line[m.end():]}"


class Retagger:
    """Rebuilds each rank's lines from the launcher's tagged output.

    Open MPI tags every *write* of a rank, not every line: a rank that prints
    one line in two writes ("rank", " 0 of 2\n") arrives as one physical line
    with a second tag inside it, and another rank's write can land between the
    two halves.  So a physical line is split at every tag, and each
    (rank, stream) keeps its unfinished text until a segment ends the line.
    Only tags that name the stream (``[1,3]<stdout>:``) are looked for inside a
    line: a bare ``[3]`` (MPICH) is too likely to be the program's own text.
    """

    def __init__(self, tag_re: re.Pattern, rank_hosts: Mapping[int, str]):
        self.tag_re = tag_re
        self.rank_hosts = rank_hosts
        self.inner_re = re.compile(tag_re.pattern.lstrip("^")) if "stream" in tag_re.groupindex else None
        self.partial: dict[tuple[str, str], str] = {}

    def _label(self, rank: str) -> str:
        return f"[{int(rank)} {self.rank_hosts.get(int(rank), '?')}] "

    def feed(self, line: str) -> list[str]:
        """One physical line (no newline) in, the complete lines it finishes out."""
        if self.inner_re is None or not self.tag_re.match(line):
            return [retag(line, self.tag_re, self.rank_hosts)]
        tags = list(self.inner_re.finditer(line))
        out = []
        for i, m in enumerate(tags):
            key = (m.group("rank"), m.group("stream"))
            text = line[m.end():tags[i + 1].start() if i + 1 < len(tags) else len(line)]
            if i + 1 < len(tags):
                self.partial[key] = self.partial.get(key, "") + text
            else:
                out.append(self._label(key[0]) + self.partial.pop(key, "") + text)
        return out

    def flush(self) -> list[str]:
        """Text of ranks that ended without a final newline."""
        out = [self._label(rank) + text for (rank, _), text in sorted(self.partial.items()) if text]
        self.partial.clear()
        return out


#: Open MPI's messages that only restate a rank's exit (the job's failure summary names it as the root
#: cause): left out of the copy under -q, kept in the tail for the failure file.
RANK_EXIT_BANNERS = ("Primary job  terminated normally, but", "Primary job terminated normally, but",
                     "mpirun detected that one or more processes exited with non-zero status",
                     "mpirun noticed that process rank")


#: Open MPI 4's 22-line notice (help-orterun.txt ``proc-exit-no-sync``) that a rank exited without MPI_Init while
#: others called it, or without MPI_Finalize: every stop of an MPI program ends that way.  Replaced by one line
#: (``improper_exit_line``) on every output level; ``orte_execute_quiet``, the MCA parameter that hides it, would
#: hide every other message of mpirun's too (a missing host, too few slots).
IMPROPER_EXIT = "exiting improperly. There are three reasons this could occur"
_IMPROPER_RE = re.compile(r"process rank (\d+) with PID \d+ on\s+node (\S+) exiting improperly")


def improper_exit_line(held: list[str], rank_hosts: Mapping[int, str]) -> str:
    """The one line that stands for Open MPI's improper-exit notice ``held`` (its lines, rulers included)."""
    m = _IMPROPER_RE.search(" ".join(held))
    who = f"rank {m.group(1)} on {rank_hosts.get(int(m.group(1)), m.group(2))}" if m else "a rank"
    return (f"mpirun: {who} exited without MPI_Init while other ranks called it, or without MPI_Finalize "
            "(Open MPI's notice, shortened); the other ranks were stopped")


def _is_ruler(line: str) -> bool:
    return len(line) >= 20 and not line.strip("-")


def pump_tagged(src: BinaryIO, dst: BinaryIO, tag_re: re.Pattern, rank_hosts: Mapping[int, str],
          tail: collections.deque, lock: threading.Lock, *, drop_rank_exit_banners: bool = False) -> None:
    r"""Copy the launcher's output to ``dst``, each rank's bytes exactly as it wrote them behind ``[rank host]``.

    Bytes that are not UTF-8 survive the round trip (surrogateescape), and only the one newline that
    ends a physical line is taken off: a ``\r`` before it, tabs and trailing spaces are the program's.
    A last line without a newline comes out with one, so the next prefix starts a line.
    ``drop_rank_exit_banners`` (-q): Open MPI's ruler-framed messages that only say a rank exited
    non-zero (RANK_EXIT_BANNERS) are not copied; every other message is, once its frame closes.
    """
    retagger = Retagger(tag_re, rank_hosts)
    held: list[str] | None = None   # an open ruler-framed message of mpirun's
    for raw in iter(src.readline, b""):
        text = raw.decode(errors="surrogateescape")
        lines = retagger.feed(text[:-1] if text.endswith("\n") else text)
        lines, held = _frame(lines, held, tail, lock, rank_hosts, drop_rank_exit_banners)
        _emit(lines, dst, tail, lock)
    _emit((held or []) + retagger.flush(), dst, tail, lock)


def _frame(lines: list[str], held: list[str] | None, tail: collections.deque, lock: threading.Lock,
           rank_hosts: Mapping[int, str], drop_rank_exit_banners: bool) -> tuple[list[str], list[str] | None]:
    """Hold mpirun's ruler-framed message until its closing ruler; then pass it on, shorten the improper-exit
    notice to one line (``IMPROPER_EXIT``, always), or, under ``drop_rank_exit_banners``, drop a rank-exit one
    (its text still goes to the tail).  Ranks' lines (``[rank host] ...``) are never rulers."""
    out: list[str] = []
    for line in lines:
        if held is None:
            if _is_ruler(line):
                held = [line]
            else:
                out.append(line)
            continue
        held.append(line)
        if _is_ruler(line) and len(held) > 1:
            if any(IMPROPER_EXIT in h for h in held):
                out.append(improper_exit_line(held, rank_hosts))
            elif drop_rank_exit_banners and any(b in h for h in held for b in RANK_EXIT_BANNERS):
                _emit(held, None, tail, lock)
            else:
                out += held
            held = None
    return out, held


def _emit(lines: list[str], dst: BinaryIO | None, tail: collections.deque, lock: threading.Lock) -> None:
    for line in lines:
        # Open MPI frames its messages with rulers; they only waste the 1024-char failure text.
        data = line.encode(errors="surrogateescape")
        if line.strip("- \t"):
            with lock:
                # The failure text is stored and sent as UTF-8: undecodable bytes become U+FFFD there only.
                tail.append(data.decode(errors="replace"))
        if dst is None:
            continue
        try:
            dst.write(data + b"\n")
            dst.flush()
        except (OSError, ValueError):
            pass


def copy_prefixed(src: BinaryIO, out: BinaryIO, prefix: str, lock: threading.Lock) -> None:
    """Copy ``src`` to ``out`` line by line until it ends, bytes unchanged behind ``prefix``.

    A last line without a newline gets one, so the next prefix starts a line; ``lock`` keeps
    the lines of several sources from interleaving.
    """
    pre = prefix.encode()
    for raw in iter(src.readline, b""):
        with lock:
            out.write(pre + (raw if raw.endswith(b"\n") else raw + b"\n"))
            out.flush()


class FileTail:
    """Follows one log file, copying each complete new line, bytes unchanged, behind a prefix."""

    def __init__(self, path: Path, prefix: str):
        self.path, self.prefix, self.pos, self.buf = path, prefix.encode(), 0, b""

    def pump(self, out: BinaryIO, final: bool = False) -> None:
        """Copy what was appended since the last call; ``final`` also flushes a last line without a newline."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
                self.pos = f.tell()
        except OSError:
            return
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        if final and self.buf:
            lines, self.buf = lines + [self.buf], b""
        for line in lines:
            out.write(self.prefix + line + b"\n")
        out.flush()


class FdTee:
    """Everything written to file descriptor ``fd`` (ours and our children's: they inherit it) also appended to
    ``path``: ``submit`` in the foreground keeps the job's output in its run directory (records.RUN_FILES's
    ``output.log``) while the terminal still shows it.  ``close`` puts ``fd`` back and waits for the copy;
    the log keeps what arrived even when the original reader left (a closed pipe)."""

    def __init__(self, fd: int, path: str | Path):
        import os

        self.fd, self._os = fd, os
        self.saved = os.dup(fd)
        self.log = open(path, "ab")
        r, w = os.pipe()
        os.dup2(w, fd)
        os.close(w)
        self.thread = threading.Thread(target=self._pump, args=(r,), name="fd-tee", daemon=True)
        self.thread.start()

    def _pump(self, r: int) -> None:
        os, reader_gone = self._os, False
        try:
            while True:
                data = os.read(r, 65536)
                if not data:
                    return
                self.log.write(data)
                self.log.flush()
                view = memoryview(data)
                while view and not reader_gone:
                    try:
                        view = view[os.write(self.saved, view):]
                    except OSError:   # the reader left (`| head`); the log still gets everything
                        reader_gone = True
        finally:
            os.close(r)

    def close(self, wait_s: float = 5.0) -> None:
        """Restore ``fd``; the copy ends when the last writer (a child that outlived us too) closes the pipe."""
        self._os.dup2(self.saved, self.fd)
        self.thread.join(wait_s)
        self._os.close(self.saved)
        if not self.thread.is_alive():
            self.log.close()
