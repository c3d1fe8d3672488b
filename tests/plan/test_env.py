"""Environment allow-list and AWS credential drop (redaction itself: tests/test_redact.py)."""
from mpirun_kit.plan.env import AWS_WHY, SECRET_WHY, STATE_WHY, left_behind, resolve_env

ENVIRON = {
    "PATH": "/bin", "HOME": "/root", "NCCL_DEBUG": "INFO", "HF_TOKEN": "hf_x", "SM_HOSTS": '["algo-1"]',
    "SM_CURRENT_HOST": "algo-1", "AWS_SECRET_ACCESS_KEY": "s", "AWS_ACCESS_KEY_ID": "i", "AWS_REGION": "us-east-1",
    "MY_VAR": "m", "DB_PASSWORD": "p",
}


def test_default_allow_list():
    env, dropped = resolve_env(ENVIRON)
    # HF_TOKEN matches a forwarded prefix but looks secret: not picked up by the prefix, and named (issue #40).
    # SM_CURRENT_HOST is per host.  HOME, MY_VAR, AWS credentials are not on the list; AWS_REGION is.
    assert env == (("AWS_REGION", "us-east-1"), ("NCCL_DEBUG", "INFO"), ("PATH", "/bin"), ("SM_HOSTS", '["algo-1"]'))
    assert dropped == (("HF_TOKEN", SECRET_WHY),)
    assert SECRET_WHY.startswith("secret-looking name: not forwarded unless named; name it in env_forward")
    # what else stays behind, for the plan to name (HOME is each host's own)
    assert left_behind(ENVIRON, env, dropped) == ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD",
                                                  "MY_VAR")


def test_the_prefixes_users_rely_on_are_forwarded():
    environ = {"WANDB_PROJECT": "p", "MLFLOW_TRACKING_URI": "u", "CUDA_HOME": "/usr/local/cuda",
               "CUDA_VISIBLE_DEVICES": "0", "WANDB_API_KEY": "k", "MYVAR": "m"}
    env, dropped = resolve_env(environ)
    assert dict(env) == {"WANDB_PROJECT": "p", "MLFLOW_TRACKING_URI": "u", "CUDA_HOME": "/usr/local/cuda"}
    assert dropped == (("WANDB_API_KEY", SECRET_WHY),)     # CUDA_VISIBLE_DEVICES: this host's GPUs only
    assert left_behind(environ, env, dropped) == ("MYVAR",)


def test_local_inherits_the_whole_environment_less_secrets_and_launcher_state():
    """Target local: the submitting shell's environment, as torchrun's ranks get it (issue #40)."""
    environ = {**ENVIRON, "CUDA_VISIBLE_DEVICES": "1", "SLURM_JOB_ID": "7", "OMPI_COMM_WORLD_RANK": "0",
               "OMPI_MCA_btl": "tcp", "SHLVL": "2", "BASH_FUNC_f%%": "() { :; }"}
    env, dropped = resolve_env(environ, inherit=True)
    assert dict(env) == {"PATH": "/bin", "HOME": "/root", "NCCL_DEBUG": "INFO", "SM_HOSTS": '["algo-1"]',
                         "SM_CURRENT_HOST": "algo-1", "AWS_REGION": "us-east-1", "MY_VAR": "m",
                         "CUDA_VISIBLE_DEVICES": "1"}
    assert dict(dropped) == {"AWS_ACCESS_KEY_ID": AWS_WHY, "AWS_SECRET_ACCESS_KEY": AWS_WHY, "DB_PASSWORD": SECRET_WHY,
                             "HF_TOKEN": SECRET_WHY, "OMPI_COMM_WORLD_RANK": STATE_WHY, "SLURM_JOB_ID": STATE_WHY}
    assert left_behind(environ, env, dropped) == ()
    env, dropped = resolve_env(environ, forward=("HF_TOKEN",), inherit=True)   # named: sent
    assert dict(env)["HF_TOKEN"] == "hf_x" and "HF_TOKEN" not in dict(dropped)


def test_explicit_names_and_values_win():
    env, dropped = resolve_env(ENVIRON, forward=("MY_VAR", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "UNSET"),
                               explicit=(("NCCL_DEBUG", "WARN"), ("AWS_ACCESS_KEY_ID", "x")))
    assert env == (("AWS_REGION", "us-east-1"), ("HF_TOKEN", "hf_x"), ("MY_VAR", "m"), ("NCCL_DEBUG", "WARN"), ("PATH", "/bin"),
                   ("SM_HOSTS", '["algo-1"]'))
    assert dropped == (("AWS_ACCESS_KEY_ID", "AWS credential: never forwarded; ranks use the instance role"),
                       ("AWS_SECRET_ACCESS_KEY", "AWS credential: never forwarded; ranks use the instance role"))


def test_a_multi_host_job_takes_the_allow_list_less_this_hosts_own():
    """Issue #40 item 4: what a job whose master is another host takes from the submitting shell.  This host's
    paths, region and the platform's own variables stay (each host has its own) unless named in env_forward."""
    from mpirun_kit.plan.env import submit_env

    environ = {**ENVIRON, "WANDB_PROJECT": "w", "CUDA_HOME": "/c", "MPIRUN_KIT_STATE_DIR": "/s", "PYTHONPATH": "/p",
               "LANG": "C.UTF-8"}
    env, dropped, left = submit_env(environ)
    assert dict(env) == {"NCCL_DEBUG": "INFO", "WANDB_PROJECT": "w", "CUDA_HOME": "/c", "LANG": "C.UTF-8"}
    assert dropped == (("HF_TOKEN", SECRET_WHY),)
    assert left == ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "MY_VAR")   # PATH ...: each host's
    env, _, left = submit_env(environ, forward=("PATH", "MY_VAR", "AWS_SECRET_ACCESS_KEY"))
    assert dict(env)["PATH"] == "/bin" and dict(env)["MY_VAR"] == "m" and "AWS_SECRET_ACCESS_KEY" not in dict(env)
    assert "PATH" not in left and "MY_VAR" not in left
