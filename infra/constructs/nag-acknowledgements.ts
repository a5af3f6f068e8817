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
}
