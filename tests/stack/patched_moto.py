"""A moto server on 127.0.0.1 with three gaps filled where AWS's behaviour is known and moto lacks it.

Run as ``python tests/stack/patched_moto.py PORT`` (test_walkthrough.py starts it as its own
process, so the patches never touch the moto other tests use).  What is changed, and why:

1. Stacks created or updated through a change set get their Outputs.  moto builds the
   output map only in create_stack/update_stack (ChangeSet.apply never rebuilds it), so
   ``stack outputs`` after ``stack deploy`` would be empty; AWS fills them.
2. ``AWS::FSx::FileSystem`` resources are created through moto's own FSx backend
   (moto's CloudFormation skips the type), with ``DNSName`` and ``LustreMountName``
   attributes; the mount name is derived from the id (AWS picks 8 random letters).
3. ``UpdateTerminationProtection`` exists (moto has no handler for it) and sets the flag
   DescribeStacks reports.

Everything else is stock moto: VPC, subnets, security groups, NAT gateways, EFS, IAM,
S3 and SageMaker answer as moto does elsewhere in the suite.
"""
from __future__ import annotations

import sys
import time
from typing import Any


def _patch() -> None:
    from moto.cloudformation import models as cfn_models
    from moto.cloudformation import parsing
    from moto.cloudformation.responses import CloudFormationResponse
    from moto.core.common_models import CloudFormationModel
    from moto.core.responses import ActionResult

    original_apply = cfn_models.ChangeSet.apply

    def apply_with_outputs(self: Any) -> None:
        original_apply(self)
        stack = self.stack
        stack.template = self.template
        stack._parse_template()
        stack.output_map = stack._create_output_map()

    cfn_models.ChangeSet.apply = apply_with_outputs

    class FsxLustre(CloudFormationModel):
        __module__ = "moto.fsx.models"  # moto's model metaclass names the service after the module

        def __init__(self, fs: Any) -> None:
            self.fs = fs

        @staticmethod
        def cloudformation_name_type() -> str:
            return ""

        @staticmethod
        def cloudformation_type() -> str:
            return "AWS::FSx::FileSystem"

        @classmethod
        def has_cfn_attr(cls, attr: str) -> bool:
            return attr in ("DNSName", "LustreMountName")

        @classmethod
        def create_from_cloudformation_json(cls, resource_name: str, cloudformation_json: Any, account_id: str,
                                            region_name: str, **kwargs: Any) -> "FsxLustre":
            from moto.fsx.models import fsx_backends

            p = cloudformation_json["Properties"]
            fs = fsx_backends[account_id][region_name].create_file_system(
                client_request_token=resource_name, file_system_type=p["FileSystemType"],
                storage_capacity=int(p["StorageCapacity"]), storage_type=p.get("StorageType", "SSD"),
                subnet_ids=p["SubnetIds"], security_group_ids=p.get("SecurityGroupIds"), tags=p.get("Tags"),
                kms_key_id=None, windows_configuration=None, lustre_configuration=p.get("LustreConfiguration"),
                ontap_configuration=None, file_system_type_version=p.get("FileSystemTypeVersion"),
                open_zfs_configuration=None)
            return cls(fs)

        @property
        def physical_resource_id(self) -> str:
            return self.fs.file_system_id

        def get_cfn_attribute(self, attribute_name: str) -> str:
            if attribute_name == "DNSName":
                return self.fs.dns_name
            return self.fs.file_system_id[-8:]

    for cached in (parsing.get_model_list, parsing.get_model_map, parsing.get_name_type_map):
        cached.cache_clear()
    assert parsing.get_model_map()["AWS::FSx::FileSystem"] is FsxLustre

    def update_termination_protection(self: Any) -> Any:
        stack = self.cloudformation_backend.get_stack(self._get_param("StackName"))
        stack.enable_termination_protection = str(self._get_param("EnableTerminationProtection")).lower() == "true"
        return ActionResult({"StackId": stack.stack_id})

    CloudFormationResponse.update_termination_protection = update_termination_protection


def main(port: int) -> None:
    _patch()
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    print(f"ready {port}", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main(int(sys.argv[1]))
