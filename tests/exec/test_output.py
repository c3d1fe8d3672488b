"""Output pumping (exec/output.py): each MPI flavour's tag is taken off exactly, the bytes a rank wrote come
out unchanged; prefixed copies and followed log files keep bytes as written.

The samples are what real launchers printed here for one rank of the program below (saved, like torchx's
saved scheduler output, because only Open MPI 4 is installed in the test environment; Open MPI 5.0.11 and
MPICH 5.0.2 came from their PyPI wheels).  tests/targets/test_local.py runs the same kind of program through
the real Open MPI 4 with many ranks.

    def w(b, fd=1): os.write(fd, b); time.sleep(0.05)
    w(b"    indented\\n"); w(b"a b  c"); w(b" "); w(b"0"); w(b" d\\n"); w(b"\\ttab\\t\\n"); w(b"trail   \\n")
    w(b"\\n"); w(b" \\n"); w(b"\\xff\\xfe bin \\x00 x\\r\\n"); w(b"l1\\nl2\\n"); w(b"  err\\n", 2); w(b"no newline")
"""
from __future__ import annotations

import collections
import io
import re
import threading

import pytest

from mpirun_kit.exec.output import FileTail, copy_prefixed, pump_tagged
from mpirun_kit.plan.mpi import FLAVOURS

SAMPLES = {
    # mpirun --tag-output (Open MPI 4.1.4): the tag, then the text; one tag per write and per line.
    "openmpi4": (b"[1,0]<stdout>:    indented\n[1,0]<stdout>:a b  c[1,0]<stdout>: [1,0]<stdout>:0[1,0]<stdout>: d\n"
                 b"[1,0]<stdout>:\ttab\t\n[1,0]<stdout>:trail   \n[1,0]<stdout>:\n[1,0]<stdout>: \n"
                 b"[1,0]<stdout>:\xff\xfe bin \x00 x\r\n[1,0]<stdout>:l1\n[1,0]<stdout>:l2\n[1,0]<stdout>:no newline",
                 b"[1,0]<stderr>:  err\n"),
    # mpirun --output tag (Open MPI 5.0.11): the tag and one space; PRRTE joins a line's writes itself.
    "openmpi5": (b"[1,0]<stdout>:     indented\n[1,0]<stdout>: a b  c 0 d\n[1,0]<stdout>: \ttab\t\n"
                 b"[1,0]<stdout>: trail   \n[1,0]<stdout>: \n[1,0]<stdout>:  \n[1,0]<stdout>: \xff\xfe bin \x00 x\r\n"
                 b"[1,0]<stdout>: l1\n[1,0]<stdout>: l2\n[1,0]<stdout>: no newline",
                 b"[1,0]<stderr>:   err\n"),
    # mpiexec -prepend-pattern '[%r]<hydra>:' (MPICH 5.0.2 Hydra): the pattern, once per write and per line.
    "mpich": (b"[0]<hydra>:    indented\n[0]<hydra>:a b  c[0]<hydra>: [0]<hydra>:0[0]<hydra>: d\n"
              b"[0]<hydra>:\ttab\t\n[0]<hydra>:trail   \n[0]<hydra>:\n[0]<hydra>: \n"
              b"[0]<hydra>:\xff\xfe bin \x00 x\r\n[0]<hydra>:l1\n[0]<hydra>:l2\n[0]<hydra>:no newline",
              b"[0]<hydra>:  err\n"),
}
EXPECTED_OUT = (b"[0 algo-1]     indented\n[0 algo-1] a b  c 0 d\n[0 algo-1] \ttab\t\n[0 algo-1] trail   \n"
                b"[0 algo-1] \n[0 algo-1]  \n[0 algo-1] \xff\xfe bin \x00 x\r\n[0 algo-1] l1\n[0 algo-1] l2\n"
                b"[0 algo-1] no newline\n")
EXPECTED_ERR = b"[0 algo-1]   err\n"


def pump(flavour: str, data: bytes) -> tuple[bytes, tuple[str, ...]]:
    out, tail = io.BytesIO(), collections.deque(maxlen=20)
    pump_tagged(io.BytesIO(data), out, re.compile(FLAVOURS[flavour].tag_regex), {0: "algo-1"}, tail, threading.Lock())
    return out.getvalue(), tuple(tail)


@pytest.mark.parametrize("flavour", sorted(SAMPLES))
def test_each_flavours_tag_is_stripped_exactly_and_the_bytes_survive(flavour):
    stdout, stderr = SAMPLES[flavour]
    out, tail = pump(flavour, stdout)
    assert out == EXPECTED_OUT
    assert pump(flavour, stderr)[0] == EXPECTED_ERR
    # The failure text is UTF-8: there (only) undecodable bytes are replaced.
    assert "[0 algo-1] \ufffd\ufffd bin \x00 x\r" in tail


@pytest.mark.parametrize("flavour", sorted(SAMPLES))
def test_two_ranks_interleaved_mid_line(flavour):
    tag = {"openmpi4": "[1,{}]<stdout>:", "openmpi5": "[1,{}]<stdout>: ", "mpich": "[{}]<hydra>:"}[flavour]
    t0, t1 = tag.format(0), tag.format(1)
    # rank 0 writes "  x" and " y\n" apart; rank 1's whole line lands between them on the same physical line.
    data = f"{t0}  x{t1}\tother \n{t0} y\n".encode()
    out, _ = pump(flavour, data)
    assert out == b"[1 ?] \tother \n[0 algo-1]   x y\n"


def test_mpich_is_asked_for_the_tag_its_regex_reads():
    f = FLAVOURS["mpich"]
    assert f.tag_args == ("-prepend-pattern", "[%r]<hydra>:")
    assert re.match(f.tag_regex, "[12]<hydra>: text").end() == len("[12]<hydra>:")
    # a bare "[3] " is program text, not a tag
    assert re.match(f.tag_regex, "[3] items") is None


def test_copy_prefixed_keeps_bytes_and_ends_the_last_line():
    out = io.BytesIO()
    copy_prefixed(io.BytesIO(b"a\xff\r\n\n  b"), out, "[algo-2 entrypoint] ", threading.Lock())
    assert out.getvalue() == b"[algo-2 entrypoint] a\xff\r\n[algo-2 entrypoint] \n[algo-2 entrypoint]   b\n"


def test_file_tail_copies_complete_lines_as_the_file_grows(tmp_path):
    log, out = tmp_path / "entrypoint.log", io.BytesIO()
    tail = FileTail(log, "[h] ")
    tail.pump(out)  # no file yet: nothing, no error
    log.write_bytes(b"one\ntw")
    tail.pump(out)
    assert out.getvalue() == b"[h] one\n"
    with open(log, "ab") as f:
        f.write(b"o\nthree")
    tail.pump(out)
    tail.pump(out, final=True)
    assert out.getvalue() == b"[h] one\n[h] two\n[h] three\n"


RULER = b"-" * 74 + b"\n"
BANNERS = (RULER + b"Primary job  terminated normally, but 1 process returned\n"
           b"a non-zero exit code. Per user-direction, the job has been aborted.\n" + RULER
           + RULER + b"mpirun detected that one or more processes exited with non-zero status, thus causing\n"
           b"the job to be terminated. The first process to do so was:\n\n  Process name: [[1,1],1]\n"
           b"  Exit code:    3\n" + RULER)
OTHER = RULER + b"mpirun was unable to launch the specified application as it could not access\n" + RULER


@pytest.mark.parametrize("quiet", [False, True])
def test_rank_exit_banners_are_left_out_under_quiet_and_kept_in_the_tail(quiet):
    """Issue 22 defect 3: with -q, Open MPI's two banners restating a rank's exit filled stderr; they are
    dropped from the copy (the summary names the root cause) but stay in the failure text.  Any other
    message of mpirun's (a launch failure) is copied whole, and a rank's own ruler is the rank's."""
    src = io.BytesIO(b"[1,1]<stderr>:" + RULER + BANNERS + OTHER + b"[1,0]<stdout>:done\n")
    dst, tail = io.BytesIO(), collections.deque(maxlen=50)
    pump_tagged(src, dst, re.compile(FLAVOURS["openmpi4"].tag_regex), {0: "h", 1: "h"}, tail, threading.Lock(),
                drop_rank_exit_banners=quiet)
    expected = b"[1 h] " + RULER + (b"" if quiet else BANNERS) + OTHER + b"[0 h] done\n"
    assert dst.getvalue() == expected
    assert "  Exit code:    3" in tail and "[0 h] done" in tail


#: Open MPI 4.1's notice for a rank that exits without MPI_Init (others called it) or without MPI_Finalize,
#: as mpirun 4.1.4 printed it here (tests/exec/test_process.py makes a real one).
IMPROPER = (RULER + b"mpirun has exited due to process rank 1 with PID 0 on\n"
            b"node vm exiting improperly. There are three reasons this could occur:\n\n"
            b"1. this process did not call \"init\" before exiting, but others in\n"
            b"the job did. This can cause a job to hang indefinitely while it waits\n"
            b"for all processes to call \"init\". By rule, if one process calls \"init\",\n"
            b"then ALL processes must call \"init\" prior to termination.\n\n"
            b"2. this process called \"init\", but exited without calling \"finalize\".\n"
            b"By rule, all processes that call \"init\" MUST call \"finalize\" prior to\n"
            b"exiting or it will be considered an \"abnormal termination\"\n\n"
            b"3. this process called \"MPI_Abort\" or \"orte_abort\" and the mca parameter\n"
            b"orte_create_session_dirs is set to false. In this case, the run-time cannot\n"
            b"detect that the abort call was an abnormal termination. Hence, the only\n"
            b"error message you will receive is this one.\n\n"
            b"This may have caused other processes in the application to be\n"
            b"terminated by signals sent by mpirun (as reported here).\n\n"
            b"You can avoid this message by specifying -quiet on the mpirun command line.\n" + RULER)


@pytest.mark.parametrize("quiet", [False, True])
def test_the_improper_exit_notice_is_one_line_on_every_level(quiet):
    """Issue 28 item 5: every stop of an MPI program printed Open MPI's 22-line notice, even with -q; now one
    line names the rank and its host (the plan's name), in the copy and in the failure text's tail."""
    src = io.BytesIO(b"[1,0]<stdout>:before\n" + IMPROPER + OTHER)
    dst, tail = io.BytesIO(), collections.deque(maxlen=50)
    pump_tagged(src, dst, re.compile(FLAVOURS["openmpi4"].tag_regex), {0: "algo-1", 1: "algo-2"}, tail,
                threading.Lock(), drop_rank_exit_banners=quiet)
    line = ("mpirun: rank 1 on algo-2 exited without MPI_Init while other ranks called it, or without MPI_Finalize "
            "(Open MPI's notice, shortened); the other ranks were stopped")
    assert dst.getvalue() == b"[0 algo-1] before\n" + line.encode() + b"\n" + OTHER
    assert line in tail and not any("three reasons" in t for t in tail)
