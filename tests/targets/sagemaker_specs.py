"""The SageMaker job specs the sagemaker target tests share (a helper module, not a test file)."""
import textwrap

SPEC = textwrap.dedent("""\
    apiVersion: mpirun_kit/v1
    kind: Job
    name: mrcnn
    target:
      type: sagemaker
      sagemaker:
        role: ${stack:mrk-role.RoleArn}
        region: us-west-2
        output_s3: s3://bucket/out
        max_run_s: 3600
        tags: {team: vision}
    image: 1.dkr.ecr.us-west-2.amazonaws.com/mrk:1
    resources: {instance_type: ml.p4d.24xlarge, hosts: 2}
    program:
      module: mpirun_kit.maskrcnn.train
      args: [--data-dir, "${data:coco}", --output-dir, "${checkpoint}"]
    data:
      coco:
        fsx: {file_system_id: "${stack:mrk-fsx.FileSystemId}", mount_name: abcd, path: /coco/2017}
      home:
        efs: {file_system_id: fs-0abcdef0123456789, path: /users/a}
        mode: rw
      extra:
        s3: s3://bucket/extra
    checkpoint: {s3: s3://bucket/ckpt}
    vpc: {subnets: [subnet-1], security_groups: [sg-1]}
    env: {NCCL_DEBUG: INFO}
    retries: 2
    spot: {enabled: true}
    """)
OUTPUTS = {"mrk-role": {"RoleArn": "arn:aws:iam::123456789012:role/mrk"}, "mrk-fsx": {"FileSystemId": "fs-0123456789abcdef0"}}
#: SPEC with a secret-looking env var, explicitly allowed in plain text (without the opt-in it is an error).
SECRET_SPEC = SPEC.replace("env: {NCCL_DEBUG: INFO}", "env: {NCCL_DEBUG: INFO, WANDB_API_KEY: hunter2}").replace(
    "    tags: {team: vision}\n", "    tags: {team: vision}\n    allow_plaintext_secrets: [WANDB_API_KEY]\n")
