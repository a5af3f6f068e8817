"""boto3 clients made as the threadgate CLI makes them: the region from AWS_REGION first.

boto3 reads AWS_DEFAULT_REGION and the profile's region but not AWS_REGION, which the CLI and the
AWS SDKs for JavaScript, Go and Java read first; without this, `AWS_REGION=eu-west-1 python3 job.py`
raised NoRegionError (or used the profile's region) where `threadgate` used eu-west-1.
"""

import os


def client(name, given=None):
    """`given` when the caller passed a client; else a boto3 client, in AWS_REGION when it is set."""
    if given is not None:
        return given
    import boto3

    region = os.environ.get("AWS_REGION")
    return boto3.client(name, region_name=region) if region else boto3.client(name)
