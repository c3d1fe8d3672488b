"""The master's channel pieces (entrypoint/master.py) as values: what the ranks are told about key files, and the
refusal counts in the job's result.  The real server, on 127.0.0.1."""
from channel_kit import make_server, worker_link
from mpirun_kit.cluster.discover import Cluster, Host
from mpirun_kit.entrypoint.master import _run_nonce_value, with_rejections
from mpirun_kit.exec.result import JobResult
from mpirun_kit.plan.launch_plan import build_launch_plan
from mpirun_kit.spec.launch_spec import LaunchSpec


def plan_of(hosts):
    cluster = Cluster(hosts=tuple(Host(h, 1) for h in hosts), current_host=hosts[0], source="test")
    return build_launch_plan(LaunchSpec(program=("true",)), cluster, {}, 0, master=hosts[0])


def test_launch_tells_ranks_on_hosts_without_an_entrypoint_not_to_wait_for_a_key_file():
    plan = plan_of(["algo-1", "algo-2", "algo-3"])
    with make_server({0: "algo-1", 1: "algo-2", 2: "algo-3"}, ["algo-2", "algo-3"]) as server:
        nonce = server.run_nonce.hex()
        assert _run_nonce_value(server, plan, workers_run_entrypoints=True) == nonce
        assert _run_nonce_value(server, plan, workers_run_entrypoints=False) == nonce + "@algo-1"
        link = worker_link(server, "algo-3")
        assert server.wait_rank_events(lambda _: server.connected_workers() == {"algo-3"}, 5.0)
        assert _run_nonce_value(server, plan, workers_run_entrypoints=False) == nonce + "@algo-1,algo-3"
        link.close()
    assert _run_nonce_value(server, plan_of(["solo"]), workers_run_entrypoints=False) == nonce


def test_the_result_names_the_channels_refusals():
    assert with_rejections(JobResult(0), {}) == JobResult(0)
    assert with_rejections(JobResult(0), {"mac": 1}).summary == (
        "result channel refused 1 message(s)/connection(s) (mac 1); see the master's log")
    assert with_rejections(JobResult(3, reason="rank 1 failed"), {"mac": 2, "address": 1}).summary == (
        "rank 1 failed\nresult channel refused 3 message(s)/connection(s) (address 1, mac 2); see the master's log")
