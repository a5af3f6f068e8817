import {
  CloudFormationClient,
  CreateStackCommand,
  DeleteStackCommand,
  DescribeStackResourcesCommand,
  DescribeStacksCommand,
} from '@aws-sdk/client-cloudformation';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clientConfig } from '../../../../local/emulator/deploy.js';
import type { MotoServer } from '../../../../local/emulator/moto.js';
import { EmulatorCloudWatch } from '../../../../local/runtime/cloudwatch/client.js';
import { startMoto } from '../../../fixtures/aws.js';

/**
 * A stack's AWS::CloudWatch::Alarm resources exist in moto (local/emulator/stack_alarms.py):
 * moto's CloudFormation has no model for them and skipped them, so the local stack had no alarm
 * to evaluate or to read back.
 */
let moto: MotoServer;
let cfn: CloudFormationClient;
let cloudwatch: EmulatorCloudWatch;

beforeAll(async () => {
  moto = await startMoto();
  cfn = new CloudFormationClient(clientConfig(moto.awsEnv));
  cloudwatch = new EmulatorCloudWatch(clientConfig(moto.awsEnv));
});
afterAll(async () => {
  cfn?.destroy();
  await moto?.stop();
});

const TEMPLATE = {
  Resources: {
    Dlq: { Type: 'AWS::SQS::Queue', Properties: { QueueName: 'alarms-dlq' } },
    DlqNotEmpty: {
      Type: 'AWS::CloudWatch::Alarm',
      Properties: {
        AlarmName: 'alarms-dlq-not-empty',
        AlarmDescription: 'Jobs reached the DLQ.',
        Namespace: 'AWS/SQS',
        MetricName: 'ApproximateNumberOfMessagesVisible',
        Dimensions: [{ Name: 'QueueName', Value: { 'Fn::GetAtt': ['Dlq', 'QueueName'] } }],
        Statistic: 'Maximum',
        Period: 60,
        EvaluationPeriods: 1,
        Threshold: 1,
        ComparisonOperator: 'GreaterThanOrEqualToThreshold',
        TreatMissingData: 'notBreaching',
      },
    },
  },
  Outputs: { AlarmRef: { Value: { Ref: 'DlqNotEmpty' } } },
};

describe("moto's CloudFormation with the launcher's alarm model", () => {
  it('creates a template alarm with its properties resolved, its Ref is its name, and it goes with the stack', async () => {
    // Act
    await cfn.send(new CreateStackCommand({ StackName: 'alarms', TemplateBody: JSON.stringify(TEMPLATE) }));
    const stack = (await cfn.send(new DescribeStacksCommand({ StackName: 'alarms' }))).Stacks?.[0];
    const resources = await cfn.send(new DescribeStackResourcesCommand({ StackName: 'alarms' }));
    const alarms = await cloudwatch.metricAlarms();
    await cfn.send(new DeleteStackCommand({ StackName: 'alarms' }));

    // Assess
    expect(stack?.StackStatus).toBe('CREATE_COMPLETE');
    expect(stack?.Outputs).toEqual([
      expect.objectContaining({ OutputKey: 'AlarmRef', OutputValue: 'alarms-dlq-not-empty' }),
    ]);
    expect(resources.StackResources?.find((r) => r.LogicalResourceId === 'DlqNotEmpty')).toMatchObject({
      ResourceType: 'AWS::CloudWatch::Alarm',
      PhysicalResourceId: 'alarms-dlq-not-empty',
    });
    expect(alarms).toEqual([
      expect.objectContaining({
        AlarmName: 'alarms-dlq-not-empty',
        Namespace: 'AWS/SQS',
        MetricName: 'ApproximateNumberOfMessagesVisible',
        Dimensions: [{ Name: 'QueueName', Value: 'alarms-dlq' }],
        Statistic: 'Maximum',
        Period: 60,
        EvaluationPeriods: 1,
        Threshold: 1,
        ComparisonOperator: 'GreaterThanOrEqualToThreshold',
        TreatMissingData: 'notBreaching',
      }),
    ]);
    expect(await cloudwatch.metricAlarms()).toEqual([]);
  });
});
