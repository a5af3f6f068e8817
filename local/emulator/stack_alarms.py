"""AWS::CloudWatch::Alarm for moto's CloudFormation, for threadgate's moto launcher.

moto stores metric alarms (PutMetricAlarm, DescribeAlarms, SetAlarmState) but its CloudFormation
has no model for AWS::CloudWatch::Alarm: it skips the stack's alarms with a warning, so the
deployed stack had none to look at. Importing this module registers one (moto finds its models
as CloudFormationModel's subclasses, so it must be imported before the first stack is parsed):
each alarm of a template is put with the alarm's own properties, its Ref is its name as on AWS,
and it goes with the stack. It answers no GetAtt, and composite alarms stay skipped.

moto never evaluates an alarm: the local runtime does (local/runtime/cloudwatch/alarms.ts).
"""

from moto.cloudwatch.models import Dimension, Metric, MetricDataQuery, MetricStat, cloudwatch_backends
from moto.core.common_models import CloudFormationModel


def _queries(metrics):
    """A math alarm's `Metrics` as moto's PutMetricAlarm keeps them."""
    queries = []
    for m in metrics or []:
        stat = m.get("MetricStat")
        metric = stat and stat.get("Metric", {})
        queries.append(
            MetricDataQuery(
                query_id=m.get("Id"),
                label=m.get("Label"),
                period=m.get("Period"),
                return_data=m.get("ReturnData"),
                expression=m.get("Expression"),
                metric_stat=stat
                and MetricStat(
                    metric=Metric(
                        metric_name=metric.get("MetricName"),
                        namespace=metric.get("Namespace"),
                        dimensions=[Dimension(d["Name"], d["Value"]) for d in metric.get("Dimensions", [])],
                    ),
                    period=stat.get("Period"),
                    stat=stat.get("Stat"),
                    unit=stat.get("Unit"),
                ),
            )
        )
    return queries or None


class StackAlarm(CloudFormationModel):
    # moto's model metaclass files each model under its service, read from the module's name.
    __module__ = "moto.cloudwatch.stack_alarms"

    def __init__(self, name):
        self.name = name

    @staticmethod
    def cloudformation_type():
        return "AWS::CloudWatch::Alarm"

    @staticmethod
    def cloudformation_name_type():
        return "AlarmName"

    @classmethod
    def create_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs):
        p = cloudformation_json["Properties"]
        cloudwatch_backends[account_id][region_name].put_metric_alarm(
            name=resource_name,
            namespace=p.get("Namespace"),
            metric_name=p.get("MetricName"),
            metric_data_queries=_queries(p.get("Metrics")),
            comparison_operator=p.get("ComparisonOperator"),
            evaluation_periods=p.get("EvaluationPeriods"),
            datapoints_to_alarm=p.get("DatapointsToAlarm"),
            period=p.get("Period"),
            threshold=p.get("Threshold"),
            statistic=p.get("Statistic"),
            extended_statistic=p.get("ExtendedStatistic"),
            description=p.get("AlarmDescription"),
            dimensions=p.get("Dimensions", []),
            alarm_actions=p.get("AlarmActions", []),
            ok_actions=p.get("OKActions", []),
            insufficient_data_actions=p.get("InsufficientDataActions", []),
            unit=p.get("Unit"),
            actions_enabled=p.get("ActionsEnabled", True),
            treat_missing_data=p.get("TreatMissingData"),
            threshold_metric_id=p.get("ThresholdMetricId"),
        )
        return cls(resource_name)

    @classmethod
    def delete_from_cloudformation_json(cls, resource_name, cloudformation_json, account_id, region_name):
        cloudwatch_backends[account_id][region_name].delete_alarms([resource_name])

    @property
    def physical_resource_id(self):
        return self.name
