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
4. Deleting a stack deletes what AWS deletes with it, so ``stack down`` can remove the VPC:
   the S3 gateway endpoint (moto's CloudFormation model has no delete, so the VPC kept a
   dependency and DeleteStack failed with DependencyViolation), the NAT gateway's network
   interface (AWS releases it with the gateway; moto kept it), the NAT and internet gateways,
   the gateway attachment and the route tables (moto's models have no delete for them), and
   the FSx file system (DeletionPolicy: Delete in cfn/fsx.yaml).

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

        def delete(self, account_id: str, region_name: str) -> None:
            from moto.fsx.models import fsx_backends

            fsx_backends[account_id][region_name].delete_file_system(self.fs.file_system_id, "", None, None, None)

    for cached in (parsing.get_model_list, parsing.get_model_map, parsing.get_name_type_map):
        cached.cache_clear()
    assert parsing.get_model_map()["AWS::FSx::FileSystem"] is FsxLustre

    from moto.ec2.models import ec2_backends
    from moto.ec2.models.nat_gateways import NatGatewayBackend
    from moto.ec2.models.vpcs import VPCEndPoint

    def delete_endpoint(self: Any, account_id: str, region_name: str) -> None:
        backend = ec2_backends[account_id][region_name]
        self.route_table_ids = [r for r in self.route_table_ids if r in backend.route_tables]
        backend.delete_vpc_endpoints([self.id])
        backend.vpc_end_points.pop(self.id, None)

    VPCEndPoint.delete = delete_endpoint
    original_delete_nat = NatGatewayBackend.delete_nat_gateway

    def delete_nat_gateway(self: Any, nat_gateway_id: str) -> Any:
        gw = original_delete_nat(self, nat_gateway_id)
        eni = getattr(gw, "_eni", None)
        if eni is not None:
            self.enis.pop(eni.id, None)
        return gw

    NatGatewayBackend.delete_nat_gateway = delete_nat_gateway
    from moto.ec2.models.internet_gateways import InternetGateway
    from moto.ec2.models.nat_gateways import NatGateway
    from moto.ec2.models.route_tables import RouteTable
    from moto.ec2.models.vpn_gateway import VPCGatewayAttachment

    def delete_nat(self: Any, account_id: str, region_name: str) -> None:
        ec2_backends[account_id][region_name].delete_nat_gateway(self.id)

    def delete_route_table(self: Any, account_id: str, region_name: str) -> None:
        backend = ec2_backends[account_id][region_name]
        if self.id in backend.route_tables and not self.main_association_id:
            backend.delete_route_table(self.id)

    def delete_attachment(self: Any, account_id: str, region_name: str) -> None:
        if (self.gateway_id or "").startswith("igw-"):
            ec2_backends[account_id][region_name].detach_internet_gateway(self.gateway_id, self.vpc_id)

    def delete_igw(self: Any, account_id: str, region_name: str) -> None:
        ec2_backends[account_id][region_name].delete_internet_gateway(self.id)

    from moto.ec2.models.route_tables import Route

    def delete_route(self: Any, account_id: str, region_name: str) -> None:
        # A route goes with its table: once the table is gone there is nothing to delete.
        backend = ec2_backends[account_id][region_name]
        table = backend.route_tables.get(self.route_table.id)
        if table is not None and self.destination_cidr_block in {r.destination_cidr_block for r in table.routes.values()}:
            backend.delete_route(self.route_table.id, self.destination_cidr_block)

    Route.delete = delete_route
    from moto.ec2.models.subnets import SubnetRouteTableAssociation

    def delete_association(self: Any, account_id: str, region_name: str) -> None:
        backend = ec2_backends[account_id][region_name]
        table = backend.route_tables.get(self.route_table_id)
        if table is not None:
            for assoc_id, subnet in list(table._associations.items()):
                if subnet == self.subnet_id:
                    backend.disassociate_route_table(assoc_id)

    SubnetRouteTableAssociation.delete = delete_association
    original_delete_stack = cfn_models.CloudFormationBackend.delete_stack

    def delete_stack(self: Any, name_or_stack_id: str) -> None:
        # Stacks made through a change set never registered their exports (patch 1 builds outputs only).
        for stack in list(self.stacks.values()):
            if name_or_stack_id in (stack.stack_id, stack.name):
                for export in stack.exports:
                    self.exports.setdefault(export.name, export)
        original_delete_stack(self, name_or_stack_id)

    cfn_models.CloudFormationBackend.delete_stack = delete_stack
    # A deleted stack has no outputs (AWS shows none): moto evaluates them on every DescribeStacks, and
    # evaluating a Ref to a deleted resource parses it again, re-creating the VPC the delete removed.
    outputs_prop = cfn_models.Stack.outputs

    def stack_outputs(self: Any) -> Any:
        return None if self.status == "DELETE_COMPLETE" else outputs_prop.fget(self)

    cfn_models.Stack.outputs = property(stack_outputs)
    exports_prop = cfn_models.Stack.exports

    def exports(self: Any) -> Any:
        return [] if self.status == "DELETE_COMPLETE" else exports_prop.fget(self)

    cfn_models.Stack.exports = property(exports)
    NatGateway.delete = delete_nat
    RouteTable.delete = delete_route_table
    VPCGatewayAttachment.delete = delete_attachment
    InternetGateway.delete = delete_igw

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
