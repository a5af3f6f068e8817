import { Validations } from 'aws-cdk-lib';
import type { IConstruct } from 'constructs';

/**
 * cdk-nag (AwsSolutions pack) findings threadgate accepts. Each acknowledgement is placed on
 * the one construct it concerns, with its reason, so a new finding anywhere else still fails
 * `npm run synth`.
 */
export interface NagTargets {
  /** Both Lambda functions (Node.js 22 runtime). */
  readonly functions: readonly IConstruct[];
  /** The two mapping-control policies (ListEventSourceMappings on `*`). */
  readonly mappingPolicies: readonly IConstruct[];
  /** Queues that hand messages to consumers outside the stack (the outcomes queue). */
  readonly handOffQueues?: readonly IConstruct[];
  /** Roles of functions that read a DynamoDB stream through a mapping (the outcome publisher). */
  readonly streamReaderRoles?: readonly IConstruct[];
}

export function acknowledgeNagFindings(targets: NagTargets): void {
  for (const fn of targets.functions) {
    Validations.of(fn).acknowledge({
      id: 'AwsSolutions::AwsSolutions-L1',
      reason:
        'Node.js 22 is the runtime threadgate is built and tested for (the design pins it); move to a newer runtime deliberately, with the test suite, not automatically.',
    });
  }
  for (const policy of targets.mappingPolicies) {
    Validations.of(policy).acknowledge({
      id: 'AwsSolutions::AwsSolutions-IAM5[Resource::*]',
      reason:
        'lambda:ListEventSourceMappings supports no resource-level permissions, so it needs Resource "*"; it only lists mappings. Get/UpdateEventSourceMapping in the same policy are scoped to the one jobs-queue mapping ARN.',
    });
  }
  for (const role of targets.streamReaderRoles ?? []) {
    Validations.of(role).acknowledge({
      id: 'AwsSolutions::AwsSolutions-IAM5[Resource::*]',
      reason:
        'dynamodb:ListStreams, which the stream mapping needs, supports no resource-level permissions, so it needs Resource "*"; it only lists stream ARNs. The stream reads (DescribeStream, GetShardIterator, GetRecords) are scoped to the outcomes table stream ARN.',
    });
  }
  for (const queue of targets.handOffQueues ?? []) {
    Validations.of(queue).acknowledge({
      id: 'AwsSolutions::AwsSolutions-SQS3',
      reason:
        'The outcomes queue is a hand-off to consumers outside the stack, each with its own failure handling; the outcomes table stays the source of truth (threadgate outcomes reads it again), so a message a consumer cannot take is theirs to dead-letter.',
    });
  }
}
