"""Environment allow-list and AWS credential drop (redaction itself: tests/test_redact.py)."""
from mpirun_kit.plan.env import resolve_env

ENVIRON = {
    "PATH": "/bin", "HOME": "/root", "NCCL_DEBUG": "INFO", "HF_TOKEN": "hf_x", "SM_HOSTS": '["algo-1"]',
    "SM_CURRENT_HOST": "algo-1", "AWS_SECRET_ACCESS_KEY": "s", "AWS_ACCESS_KEY_ID": "i", "AWS_REGION": "us-east-1",
    "MY_VAR": "m", "DB_PASSWORD": "p",
}


def test_default_allow_list():
    env, dropped = resolve_env(ENVIRON)
    # HF_TOKEN matches a forwarded prefix but looks secret: not picked up by the prefix.
    # SM_CURRENT_HOST is per host.  HOME, MY_VAR, AWS_* are not on the list.
    assert env == (("NCCL_DEBUG", "INFO"), ("PATH", "/bin"), ("SM_HOSTS", '["algo-1"]'))
    assert dropped == ()


def test_explicit_names_and_values_win():
    env, dropped = resolve_env(ENVIRON, forward=("MY_VAR", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "UNSET"),
                               explicit=(("NCCL_DEBUG", "WARN"), ("AWS_ACCESS_KEY_ID", "x")))
    assert env == (("HF_TOKEN", "hf_x"), ("MY_VAR", "m"), ("NCCL_DEBUG", "WARN"), ("PATH", "/bin"),
                   ("SM_HOSTS", '["algo-1"]'))
    assert dropped == (("AWS_ACCESS_KEY_ID", "AWS credential: never forwarded; ranks use the instance role"),
                       ("AWS_SECRET_ACCESS_KEY", "AWS credential: never forwarded; ranks use the instance role"))
