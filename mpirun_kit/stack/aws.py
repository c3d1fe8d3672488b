"""The one place CloudFormation API errors become mpirun_kit errors.

Every call deploy.py and outputs.py make goes through ``call``: botocore's exceptions
turn into ``ClusterError`` (AWS refused or could not be reached) or
``StackNotFoundError`` (a ``SpecError``: the user named a stack that is not there),
each message naming the operation, the stack and what to do.
"""
from __future__ import annotations

from typing import Any, Callable

from ..errors import ClusterError, SpecError


class StackNotFoundError(SpecError):
    """The named stack does not exist in this account and region."""

    def __init__(self, stack_name: str, region: str | None, text: str | None = None) -> None:
        where = f" in region {region}" if region else ""
        super().__init__(text or f"stack {stack_name!r} does not exist{where}; check the name with `mpirun_kit "
                         f"stack list` or create it with `mpirun_kit stack deploy {stack_name} --template cfn/...`")
        self.stack_name = stack_name


def _region(client: Any) -> str | None:
    meta = getattr(client, "meta", None)
    return getattr(meta, "region_name", None)


def is_missing_stack(exc: BaseException) -> bool:
    """CloudFormation's 'Stack with id X does not exist' (a ValidationError, not a 404)."""
    response = getattr(exc, "response", None) or {}
    err = response.get("Error", {})
    return err.get("Code") == "ValidationError" and "does not exist" in str(err.get("Message", ""))


def call(client: Any, operation: str, stack_name: str, **kwargs: Any) -> dict[str, Any]:
    """``client.<operation>(**kwargs)`` with errors mapped; ``stack_name`` "*" for account-wide calls.

    Raises:
        StackNotFoundError: the stack does not exist.
        ClusterError: any other refusal, no credentials, or no connection.
    """
    import botocore.exceptions as bx  # boto3 is imported only by the stack commands
    from botocore.parsers import ResponseParserError

    fn: Callable[..., dict[str, Any]] = getattr(client, operation)
    what = f"CloudFormation {operation}" + (f" for stack {stack_name!r}" if stack_name != "*" else "")
    try:
        return fn(**kwargs)
    except bx.ClientError as exc:
        if is_missing_stack(exc):
            raise StackNotFoundError(stack_name, _region(client)) from exc
        err = exc.response.get("Error", {})
        raise ClusterError(f"{what} failed: "
                           f"{err.get('Code', '?')}: {err.get('Message', exc)}") from exc
    except bx.NoCredentialsError as exc:
        raise ClusterError(f"{what}: no AWS credentials found; "
                           "set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY") from exc
    except (bx.EndpointConnectionError, bx.ConnectionClosedError, bx.ConnectTimeoutError,
            bx.ReadTimeoutError) as exc:
        raise ClusterError(f"{what}: cannot reach the endpoint "
                           f"({exc}); check --endpoint-url / --region and the network") from exc
    except ResponseParserError as exc:
        # What an endpoint's HTTP 500 page looks like to botocore (moto's unimplemented paths, proxies).
        raise ClusterError(f"{what}: the endpoint returned an "
                           f"unreadable response (an internal error on its side): {str(exc)[:300]}") from exc
    except bx.BotoCoreError as exc:
        raise ClusterError(f"{what} failed: {exc}") from exc
