"""stack/cost.py and its price table (issue 21 item 5): estimates as values, the table's date and source named."""
from __future__ import annotations

from mpirun_kit.stack.cost import prices, stack_monthly, training_estimate


def test_the_table_says_when_and_where_its_prices_come_from():
    p = prices()
    assert p["as_of"] and p["source"]["sagemaker_training"].startswith("https://aws.amazon.com/sagemaker/pricing")
    assert p["sagemaker_training_usd_per_hour"]["ml.p5.48xlarge"] > 0


def test_training_estimate_of_the_main_job():
    p = prices()["sagemaker_training_usd_per_hour"]["ml.p5.48xlarge"]
    line = training_estimate("ml.p5.48xlarge", 4, 172800, "us-west-2")
    assert line.startswith("4 x ml.p5.48xlarge for up to 48 h = 192 instance-hours, up to $"
                           f"{192 * p:,.0f} on demand at ${p:g}/h (price table of ")
    assert "not us-west-2" not in line


def test_a_price_the_table_lacks_is_said_not_guessed():
    assert training_estimate("ml.trn1.32xlarge", 2, 3600, "us-west-2") == (
        "2 x ml.trn1.32xlarge for up to 1 h = 2 instance-hours; no price for ml.trn1.32xlarge in the price table of "
        f"{prices()['as_of']} (mpirun_kit/stack/prices.json)")
    assert "the table holds us-east-1, us-west-2 prices, not eu-west-1's" in training_estimate(
        "ml.p4d.24xlarge", 1, 3600, "eu-west-1")


def test_monthly_cost_of_the_nat_gateways_and_fsx():
    nat = prices()["nat_gateway_usd_per_hour"] * 730
    assert stack_monthly("cfn/vpc.yaml", {}, {"CreateNatGateway": "true"}, "us-west-2").startswith(
        f"cost: 1 NAT gateway(s) cost ${nat:,.2f}/month while the stack exists")
    assert stack_monthly("cfn/vpc.yaml", {"NatGatewayPerZone": "true", "AvailabilityZone3": "us-west-2c"},
                         {"CreateNatGateway": "true"}, "us-west-2").startswith("cost: 3 NAT gateway(s)")
    assert stack_monthly("cfn/vpc.yaml", {"CreateNatGateway": "false"}, {}, "us-west-2") is None
    fsx = stack_monthly("cfn/fsx.yaml", {"StorageCapacity": "2400"}, {"DeploymentType": "SCRATCH_2"}, "us-west-2")
    assert fsx.startswith(f"cost: 2400 GiB of FSx for Lustre SCRATCH_2 costs ${2400 * 0.14:,.0f}/month")
    assert stack_monthly("cfn/efs.yaml", {}, {}, "us-west-2") is None


def _pricing_stub(price_list, region="eu-central-1", itype="ml.p5.48xlarge"):
    import boto3
    from botocore.stub import Stubber

    client = boto3.client("pricing", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.add_response("get_products", {"PriceList": price_list, "FormatVersion": "aws_v1"}, {
        "ServiceCode": "AmazonSageMaker", "MaxResults": 10,
        "Filters": [{"Type": "TERM_MATCH", "Field": "instanceName", "Value": itype},
                    {"Type": "TERM_MATCH", "Field": "regionCode", "Value": region},
                    {"Type": "TERM_MATCH", "Field": "component", "Value": "Training"}]})
    return client, stub


def test_the_estimate_takes_the_price_list_apis_current_price():
    """Issue 26: the 2024-06 table says $113.07/h for ml.p5.48xlarge; the API's price (Stubber, validated by the
    service model: moto has no Price List API) is used with its date, and the schedule's hours are priced too."""
    import json

    product = {"product": {"attributes": {"instanceName": "ml.p5.48xlarge"}}, "publicationDate": "2026-11-01T00:00:00Z",
               "terms": {"OnDemand": {"X.Y": {"effectiveDate": "2026-10-01T00:00:00Z", "priceDimensions": {
                   "X.Y.Z": {"unit": "Hrs", "pricePerUnit": {"USD": "63.3000000000"}}}}}}}
    client, stub = _pricing_stub([json.dumps(product)])
    with stub:
        line = training_estimate("ml.p5.48xlarge", 4, 172800, "eu-central-1", pricing=client, expected_s=36000)
    assert line == ("4 x ml.p5.48xlarge for up to 48 h = 192 instance-hours, up to $12,154 on demand at $63.3/h; the "
                    "schedule's expected 10 h = 40 instance-hours, about $2,532 (AWS Price List API, eu-central-1, "
                    "published 2026-11-01)")


def test_without_an_answer_from_the_api_the_table_is_used_and_dated():
    client, stub = _pricing_stub([])
    with stub:
        line = training_estimate("ml.p5.48xlarge", 4, 172800, "eu-central-1", pricing=client)
    assert line.endswith(f"(price table of {prices()['as_of']} (mpirun_kit/stack/prices.json); the table holds "
                         "us-east-1, us-west-2 prices, not eu-central-1's; the Price List API did not answer)")


def test_no_region_is_said_as_such():
    """Issue 37, finding 8: with no region the line read "prices, not None's"."""
    from mpirun_kit.stack.cost import training_estimate

    line = training_estimate("ml.p5.48xlarge", 2, 3600, None)
    assert "None" not in line
    assert "no region is set; the table holds us-east-1, us-west-2 prices" in line


def test_the_price_list_endpoint_follows_the_jobs_partition():
    """Issue 37 finding 8: the client always went to us-east-1, so GovCloud (whose credentials that endpoint
    does not take) always fell back to the table without saying why.  Pure: no AWS call."""
    from mpirun_kit.stack.cost import partition_of, price_list_endpoint

    assert price_list_endpoint("us-west-2") == ("us-east-1", None)
    assert price_list_endpoint("eu-west-1") == ("eu-central-1", None)
    assert price_list_endpoint("ap-northeast-1") == ("ap-south-1", None)
    assert price_list_endpoint("cn-north-1") == ("cn-northwest-1", None)
    assert [partition_of(r) for r in ("us-gov-west-1", "cn-northwest-1", "us-isob-east-1", "us-east-1")] == [
        "aws-us-gov", "aws-cn", "aws-iso-b", "aws"]
    where, why = price_list_endpoint("us-gov-west-1")
    assert where is None and why == (
        "the Price List API has no endpoint in the aws-us-gov partition (it answers in the aws and aws-cn "
        "partitions, with their credentials), so the price is the table's")
    assert price_list_endpoint("us-iso-east-1")[1].startswith("the Price List API has no endpoint in the aws-iso ")
    assert price_list_endpoint(None) == (None, None)


def test_govcloud_says_the_table_is_used_and_why():
    line = training_estimate("ml.p5.48xlarge", 4, 172800, "us-gov-west-1",
                             no_api=price_list_endpoint_reason("us-gov-west-1"))
    assert line.endswith(f"(price table of {prices()['as_of']} (mpirun_kit/stack/prices.json); the table holds us-east-1, "
                         "us-west-2 prices, not us-gov-west-1's; the Price List API has no endpoint in the "
                         "aws-us-gov partition (it answers in the aws and aws-cn partitions, with their "
                         "credentials), so the price is the table's)")


def price_list_endpoint_reason(region):
    from mpirun_kit.stack.cost import price_list_endpoint

    return price_list_endpoint(region)[1]
