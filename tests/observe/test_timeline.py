"""Timeline records, merge, file checks and the `mpirun_kit timeline` command.

The job timelines here are recorded with real Recorders on the system clock (the
simulated-cluster test, test_observe_sim.py, checks one written by a real job).
"""
import json
import subprocess
import sys
import time

import pytest

from mpirun_kit.errors import SpecError
from mpirun_kit.observe import timeline
from mpirun_kit.observe.timeline import Recorder, clean_records, merge

CLI = [sys.executable, "-m", "mpirun_kit.cli.main", "timeline"]


def recorded_job():
    """A 1-master, 2-worker timeline marked phase by phase, like the entrypoints do."""
    master, workers = Recorder("algo-1", "master"), {h: Recorder(h, "worker") for h in ("algo-2", "algo-3")}
    for w in workers.values():
        w.mark("started")
    master.mark("started")
    for w in workers.values():
        w.mark("sshd_up")
        w.mark("ready")
        w.mark("keys_written")
    master.mark("sshd_up")
    master.mark("ready")
    master.mark("mpirun_started")
    for w in workers.values():
        w.mark("daemon_up")
    hosts = ["algo-1", "algo-2", "algo-3"]
    ranks = []
    for r, h in enumerate(hosts):
        time.sleep(0.01)
        # the wrapper's account (rank/wrapper.py): its daemon's and its own start, its key, its CPU
        now = time.time()
        ranks.append({"event": "start", "rank": r, "host": h, "t": now, "parent_t": now - 0.004,
                      "proc_t": now - 0.003, "key_t": now - 0.001, "cpu_s": 0.03})
    for r, h in enumerate(hosts):
        time.sleep(0.01)
        ranks.append({"event": "exit", "rank": r, "host": h, "t": time.time(), "exit_code": 0, "signal": None,
                      "hello_t": ranks[r]["t"] + 0.002, "cpu_s": 0.05})
    master.mark("mpirun_exited")
    master.mark("result_published")
    for w in workers.values():
        w.mark("result_received")
        w.mark("acked")
    master.mark("acked")
    master.mark("exited")
    return merge(master, {h: w.as_list() for h, w in workers.items()}, ranks, workers)


def test_merge_write_load_roundtrip(tmp_path):
    data = recorded_job()
    path = timeline.write(tmp_path, data)
    assert path == tmp_path / "output" / "timeline.json"
    assert timeline.load(path) == json.loads(json.dumps(data))
    assert [r["phase"] for r in data["hosts"]["algo-1"]["phases"]] == list(timeline.MASTER_PHASES)
    assert [r["phase"] for r in data["hosts"]["algo-2"]["phases"]] == list(timeline.WORKER_PHASES)
    assert not list((tmp_path / "output").glob(".timeline*"))   # no temporary file left behind


def test_critical_path_names_the_last_rank_and_is_in_order():
    data = recorded_job()
    path = timeline.critical_path(data)
    whats = [s.what for s in path]
    assert whats[0].startswith("first entrypoint started (algo-")
    assert "last rank started (rank 2 on algo-3)" in whats and "last rank exited (rank 2 on algo-3)" in whats
    assert whats[-1] == "master algo-1 exited"
    assert [s.t for s in path] == sorted(s.t for s in path)
    s = timeline.summary(data)
    assert set(s["startup_cpu_s"]) == {"algo-1", "algo-2", "algo-3"} and s["launch_s"] > 0


def test_launch_account_names_every_phase_in_order_and_the_cpu_per_rank():
    data = recorded_job()
    acc = timeline.launch_account(data)
    assert list(acc["phases"]) == list(timeline.ACCOUNT_PHASES)
    assert all(v is not None and v >= 0 for v in acc["phases"].values()), acc
    got = acc["phases"]
    # each phase's last instance comes no earlier than the one it waited for
    assert got["sshd ready"] <= got["mpirun started"] <= got["daemons up"] <= got["wrappers started"] \
        <= got["keys taken"] <= got["programs started"] <= got["channel hello"], got
    assert got["key hand-off"] <= got["mpirun started"]
    cpu = acc["cpu"]
    assert cpu["wrappers_launch_s"] == pytest.approx(0.09) and cpu["wrappers_s"] == pytest.approx(0.15)
    assert cpu["per_rank_launch_s"] == pytest.approx((cpu["entrypoints_launch_s"] + 0.09) / 3)
    assert cpu["per_rank_job_s"] == pytest.approx((cpu["entrypoints_s"] + 0.15) / 3)
    assert "toolkit CPU per rank" in timeline.render_text(data)
    assert "last rank wrapper had its key (rank 2 on algo-3)" in [s.what for s in timeline.critical_path(data)]


def test_launch_account_of_an_older_timeline_says_what_it_does_not_know():
    data = recorded_job()
    for r in data["ranks"]:
        for k in ("daemon_started", "wrapper_started", "key_taken", "cpu_to_program_s", "hello", "wrapper_cpu_s"):
            r.pop(k)
    acc = timeline.launch_account(data)
    assert acc["phases"]["wrappers started"] is None and acc["cpu"]["per_rank_launch_s"] is None
    assert acc["phases"]["programs started"] is not None
    assert timeline.account_line(data) == "" and "toolkit CPU" not in timeline.render_text(data)


def test_a_wrapper_figure_that_is_not_a_number_is_refused_on_load(tmp_path):
    data = recorded_job()
    data["ranks"][0]["key_taken"] = "soon"
    path = timeline.write(tmp_path, data)
    with pytest.raises(SpecError, match="wrapper's figures must be finite numbers"):
        timeline.load(path)


def test_clean_records_rejects_hostile_input():
    good = [{"phase": "started", "t": 1.0, "mono": 2.0, "cpu_s": 0.1}]
    assert clean_records(good) == good
    assert clean_records([{**good[0], "phase": "rm -rf"}]) is None
    assert clean_records([{**good[0], "t": float("nan")}]) is None
    assert clean_records(good * 33) is None
    assert clean_records({"phase": "started"}) is None


@pytest.mark.parametrize("content, expected", [
    ("{ nope", "not a timeline: not valid JSON"),
    ('{"version": 1, "hosts": {}}', "not a timeline: field 'hosts' is missing or empty"),
    ('{"version": 1, "hosts": {"a": {"role": "master", "phases": [{"phase": "x"}]}}, "ranks": []}',
     "not a timeline: host 'a': field 'phases' is not a list of known phases with finite times"),
])
def test_bad_file_is_an_error_naming_it(tmp_path, content, expected):
    bad = tmp_path / "t.json"
    bad.write_text(content)
    with pytest.raises(SpecError, match="give the timeline.json a job wrote"):
        timeline.load(bad)
    out = subprocess.run([*CLI, str(bad)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 64
    assert out.stderr.startswith(f"mpirun_kit: error: {bad}: {expected}"), out.stderr


def test_cli_prints_critical_path_and_renders_png(tmp_path):
    path = timeline.write(tmp_path, recorded_job())
    png = tmp_path / "chart.png"
    out = subprocess.run([*CLI, str(path), "--png", str(png)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("critical path (seconds from the first entrypoint's start):\n")
    assert "last rank started (rank 2 on algo-3)" in out.stdout
    assert "entrypoint CPU time during start-up (to mpirun/daemon start): algo-1 " in out.stdout
    assert f"chart written to {png}" in out.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    js = json.loads(subprocess.run([*CLI, str(path), "--json"], capture_output=True, text=True, timeout=60).stdout)
    assert js["critical_path"][-1]["what"] == "master algo-1 exited"


def test_png_without_matplotlib_names_the_extra(tmp_path):
    path = timeline.write(tmp_path, recorded_job())
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from mpirun_kit.cli.main import main\n"
            f"sys.exit(main(['timeline', {str(path)!r}, '--png', {str(tmp_path / 'x.png')!r}]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 64, out.stderr
    assert ("mpirun_kit: error: rendering a timeline chart needs matplotlib, which is not installed: "
            "pip install 'mpirun_kit[timeline]' (or leave out --png)") in out.stderr


def test_no_link_of_the_critical_path_takes_negative_time():
    """Issue 28 item 6: a worker's clock a little ahead put "last worker sshd up" after "every sshd answered the
    master", and the next link took negative time.  Links are now in time order."""
    data = recorded_job()
    for rec in data["hosts"]["algo-3"]["phases"]:
        rec["t"] += 0.5 if rec["phase"] == "sshd_up" else 0.0      # algo-3's clock runs ahead
    path = timeline.critical_path(data)
    assert all(s.took >= 0 for s in path), [(s.what, s.took) for s in path]
    assert "-" not in "".join(line.split("+", 1)[1][:8] for line in timeline.render_text(data).splitlines()
                              if "+" in line)


def failed_and_hung(data):
    data = json.loads(json.dumps(data))
    data["ranks"][1].update(exit_code=3)
    data["ranks"][2].update(exit_code=None, signal="SIGTERM")
    data["exit_code"] = 3
    t = data["ranks"][1]["exited"] - 0.005
    data["hang"] = {"kind": "exit", "detected_at": t, "stall_s": 4, "suspects": [1], "report": None, "ranks": [
        {"rank": 1, "host": "algo-2", "idle_s": 4.2, "state": "finalize", "call": "exit",
         "where": "ompi_mpi_finalize (libmpi.so.40)", "frames": ["ompi_mpi_finalize (libmpi.so.40:0)"],
         "suspect": True, "why": "called exit and waits in MPI_Finalize while rank 0 waits in Barrier"}]}
    return data


def _red_pixels(png) -> int:
    import matplotlib.image

    img = matplotlib.image.imread(str(png))
    r, g, b = img[..., 0], img[..., 1], img[..., 2]
    return int(((r > 0.7) & (g < 0.3) & (b < 0.3)).sum())


def test_failed_and_hung_run_does_not_look_like_a_success(tmp_path):
    """Issue 28 item 6 / 29 item 5: the chart of a failed or hung run carried no mark of it."""
    ok = recorded_job()
    bad = failed_and_hung(ok)
    path = timeline.write(tmp_path, bad)
    assert timeline.load(path)["hang"]["suspects"] == [1]
    text = timeline.render_text(bad)
    assert "job failed with exit code 3; ranks ended badly: 1 (exit 3), 2 (killed by SIGTERM); a rank exited alone " \
           "(suspects: 1)" in text, text
    assert "rank exiting alone reported (suspects: 1)" in text
    assert "  * rank 1 on algo-2: called exit and waits in MPI_Finalize while rank 0 waits in Barrier" in text
    assert timeline.summary(bad)["exit_code"] == 3 and timeline.summary(ok)["hang"] is None
    pytest.importorskip("matplotlib")
    good_png, bad_png = timeline.render_png(ok, tmp_path / "ok.png"), timeline.render_png(bad, tmp_path / "bad.png")
    assert _red_pixels(good_png) == 0 and _red_pixels(bad_png) > 200
    assert "ok" not in timeline.outcome_line(bad) and timeline.outcome_line(ok) == ""


def test_a_hang_field_that_is_not_one_is_refused(tmp_path):
    data = recorded_job()
    data["hang"] = {"detected_at": "soon", "ranks": []}
    path = tmp_path / "timeline.json"
    path.write_text(json.dumps(data))
    with pytest.raises(SpecError, match="field 'hang' must be an object with a finite 'detected_at'"):
        timeline.load(path)
