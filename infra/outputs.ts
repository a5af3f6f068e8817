/**
 * The stack's CloudFormation outputs: the one list the stack defines and the CLI and the
 * local stack read back (no CDK import here, so readers stay light).
 */
export const STACK_OUTPUT_KEYS = [
  'QueueUrl',
  'QueueArn',
  'DlqUrl',
  'DlqArn',
  'TableName',
  'WorkerFunctionName',
  'AdjusterFunctionName',
  'MappingUuid',
  'LedgerTableName',
  'AdjusterRuleName',
  'SecretName',
] as const;

export type StackOutputKey = (typeof STACK_OUTPUT_KEYS)[number];

/** Outputs present only when their feature is deployed (the outcome stream: `outcomeStream=true`). */
export const OPTIONAL_STACK_OUTPUT_KEYS = ['OutcomesQueueUrl', 'OutcomeFailuresQueueUrl'] as const;

export type OptionalStackOutputKey = (typeof OPTIONAL_STACK_OUTPUT_KEYS)[number];
