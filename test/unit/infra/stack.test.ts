import { existsSync, readFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { join } from 'node:path';
import { App, Validations } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import * as iam from 'aws-cdk-lib/aws-iam';
import { AwsSolutionsChecks } from 'cdk-nag';
import { beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_TIMINGS } from '../../../functions/captchaai/timings.js';
import { ConfigError } from '../../../functions/common/errors.js';
import { worstCaseRecordMs } from '../../../functions/worker/worst-case.js';
import { resolveConfig, type ThreadgateSettings, worstCaseAttemptMs } from '../../../infra/config.js';
import { ThreadgateStack } from '../../../infra/threadgate-stack.js';

type Resource = { Type: string; Properties: Record<string, unknown>; DeletionPolicy?: string };
type Statement = { Action: string | string[]; Resource: unknown; Effect: string; Condition?: unknown };

const HOSTS = 'forms.example.com,*.staging.example.com';
/** What a lease on the slot ledger needs (SlotLedgerTable.grantLeases), sorted. */
const LEDGER_ACTIONS = ['dynamodb:DeleteItem', 'dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:UpdateItem'];

/** Synthesizes the stack; bundling is skipped (fast) unless `bundle` is set. */
function synth(settings: ThreadgateSettings = {}, options: { bundle?: boolean } = {}) {
  const app = new App({
    context: options.bundle ? { 'aws:cdk:enable-asset-metadata': true } : { 'aws:cdk:bundling-stacks': [] },
  });
  const stack = new ThreadgateStack(app, 'Threadgate', { settings: { allowedHosts: HOSTS, ...settings } });
  return { app, stack, template: Template.fromStack(stack) };
}

function onlyResource(
  template: Template,
  type: string,
  props: Record<string, unknown> = {},
): [string, Resource] {
  const found = Object.entries(template.findResources(type, { Properties: props })) as [string, Resource][];
  expect(found, `${type} matching ${JSON.stringify(props)}`).toHaveLength(1);
  return found[0]!;
}

/** Every statement of every IAM policy attached to the role of the named function. */
function statementsOf(template: Template, functionName: string): Statement[] {
  const [, fn] = onlyResource(template, 'AWS::Lambda::Function', { FunctionName: functionName });
  const roleId = (fn.Properties.Role as { 'Fn::GetAtt': [string, string] })['Fn::GetAtt'][0];
  const policies = Object.values(template.findResources('AWS::IAM::Policy')) as Resource[];
  return policies
    .filter((p) => JSON.stringify(p.Properties.Roles) === JSON.stringify([{ Ref: roleId }]))
    .flatMap((p) => (p.Properties.PolicyDocument as { Statement: Statement[] }).Statement);
}

function actionsOf(s: Statement): string[] {
  return Array.isArray(s.Action) ? s.Action : [s.Action];
}

function statementsWith(statements: Statement[], action: string): Statement[] {
  return statements.filter((s) => actionsOf(s).includes(action));
}

describe('ThreadgateStack with default settings', () => {
  let template: Template;
  let stack: ThreadgateStack;
  let json: string;

  beforeAll(() => {
    ({ template, stack } = synth());
    json = JSON.stringify(template.toJSON());
  });

  it('runs the worker on Node.js 22, arm64, with reserved concurrency equal to the initial cap', () => {
    // Prepare / Act: synthesized in beforeAll. Assess:
    template.hasResourceProperties('AWS::Lambda::Function', {
      FunctionName: 'Threadgate-worker',
      Runtime: 'nodejs22.x',
      Architectures: ['arm64'],
      Handler: 'index.handler',
      ReservedConcurrentExecutions: 4,
      Timeout: stack.config.workerTimeoutSeconds,
    });
  });

  it("sizes the worker timeout to the worker's own worst case of one record", () => {
    const [, fn] = onlyResource(template, 'AWS::Lambda::Function', { FunctionName: 'Threadgate-worker' });
    const worst = worstCaseRecordMs({
      timeScale: 1,
      targetTimeoutMs: stack.config.targetTimeoutMs,
      cooldownMs: stack.config.cooldownMs,
    });
    expect(worstCaseAttemptMs(stack.config)).toBe(worst);
    // Plus the chain's window (120 s at time scale 1), which the worker is told.
    expect(stack.config.chainSeconds).toBe(120);
    expect(fn.Properties.Timeout).toBe(Math.ceil(worst / 1000) + 120);
    const env = (fn.Properties.Environment as { Variables: Record<string, unknown> }).Variables;
    expect(env.CHAIN_SECONDS).toBe('120');
    // Within Lambda's 900 s at the defaults, with the lease beyond it.
    expect(fn.Properties.Timeout as number).toBeLessThanOrEqual(900);
    expect(stack.config.leaseSeconds).toBeGreaterThan(fn.Properties.Timeout as number);
  });

  it('maps the jobs queue with batch size 1, partial batch responses and MaximumConcurrency equal to the cap', () => {
    const [queueId] = onlyResource(template, 'AWS::SQS::Queue', { RedrivePolicy: Match.anyValue() });
    onlyResource(template, 'AWS::Lambda::EventSourceMapping', {
      EventSourceArn: { 'Fn::GetAtt': [queueId, 'Arn'] },
      BatchSize: 1,
      FunctionResponseTypes: ['ReportBatchItemFailures'],
      ScalingConfig: { MaximumConcurrency: 4 },
      Enabled: true,
    });
    // The other mapping is the outcome stream's (its own test below).
    template.resourceCountIs('AWS::Lambda::EventSourceMapping', 2);
  });

  it('gives the jobs queue a visibility timeout of six times the worker timeout and SQS-managed encryption', () => {
    const [, fn] = onlyResource(template, 'AWS::Lambda::Function', { FunctionName: 'Threadgate-worker' });
    const [, queue] = onlyResource(template, 'AWS::SQS::Queue', { RedrivePolicy: Match.anyValue() });
    expect(queue.Properties.VisibilityTimeout).toBe((fn.Properties.Timeout as number) * 6);
    expect(queue.Properties.SqsManagedSseEnabled).toBe(true);
  });

  it('redrives to a DLQ that keeps messages 14 days, after at least 5 receives', () => {
    const [, queue] = onlyResource(template, 'AWS::SQS::Queue', { RedrivePolicy: Match.anyValue() });
    const redrive = queue.Properties.RedrivePolicy as {
      maxReceiveCount: number;
      deadLetterTargetArn: unknown;
    };
    expect(redrive.maxReceiveCount).toBeGreaterThanOrEqual(5);
    const dlqId = (redrive.deadLetterTargetArn as { 'Fn::GetAtt': [string] })['Fn::GetAtt'][0];
    const dlq = template.toJSON().Resources[dlqId] as Resource;
    expect(dlq.Properties.MessageRetentionPeriod).toBe(14 * 24 * 3600);
    expect(dlq.Properties.SqsManagedSseEnabled).toBe(true);
  });

  it('keeps outcomes in an on-demand table keyed by record_key with point-in-time recovery', () => {
    template.hasResourceProperties('AWS::DynamoDB::Table', {
      KeySchema: [{ AttributeName: 'record_key', KeyType: 'HASH' }],
      BillingMode: 'PAY_PER_REQUEST',
      PointInTimeRecoverySpecification: { PointInTimeRecoveryEnabled: true },
    });
  });

  it('indexes outcome rows by batch shard and status time, with only batch_id, status and reason, so one batch spreads over 16 partitions and a waiter reads what changed', () => {
    template.hasResourceProperties('AWS::DynamoDB::Table', {
      AttributeDefinitions: Match.arrayWith([
        { AttributeName: 'batch_shard', AttributeType: 'S' },
        { AttributeName: 'status_at', AttributeType: 'S' },
      ]),
      GlobalSecondaryIndexes: [
        {
          IndexName: 'batch_shard-status_at',
          KeySchema: [
            { AttributeName: 'batch_shard', KeyType: 'HASH' },
            { AttributeName: 'status_at', KeyType: 'RANGE' },
          ],
          Projection: { ProjectionType: 'INCLUDE', NonKeyAttributes: ['batch_id', 'status', 'reason'] },
        },
      ],
    });
  });

  it('keeps the 0.1.0 batch index beside the new one with -c keepPreviousBatchIndex=true (one index created per deploy of an upgrade)', () => {
    // Prepare: as `cdk deploy -c keepPreviousBatchIndex=true` gives it
    const app = new App({ context: { 'aws:cdk:bundling-stacks': [], keepPreviousBatchIndex: 'true' } });
    const stack = new ThreadgateStack(app, 'Threadgate', { settings: { allowedHosts: HOSTS } });
    // Act
    const indexes = Template.fromStack(stack).findResources('AWS::DynamoDB::Table') as Record<
      string,
      Resource
    >;
    const names = Object.values(indexes).flatMap((t) =>
      ((t.Properties.GlobalSecondaryIndexes ?? []) as { IndexName: string; Projection: unknown }[]).map(
        (i) => [i.IndexName, i.Projection],
      ),
    );
    // Assess: the 0.1.0 index unchanged (not recreated), the new one added
    expect(names).toEqual([
      [
        'batch_shard-status_at',
        { ProjectionType: 'INCLUDE', NonKeyAttributes: ['batch_id', 'status', 'reason'] },
      ],
      ['batch_id-updated_at', { ProjectionType: 'ALL' }],
    ]);
  });

  it('publishes outcomes from the table stream (new and old images) to an encrypted outcomes queue', () => {
    // Prepare
    const [tableId] = onlyResource(template, 'AWS::DynamoDB::Table', {
      StreamSpecification: { StreamViewType: 'NEW_AND_OLD_IMAGES' },
    });
    const [publisherId, publisher] = onlyResource(template, 'AWS::Lambda::Function', {
      FunctionName: 'Threadgate-outcome-publisher',
    });
    // Assess: the mapping starts at the oldest record, one batch at a time, partial failures retried
    onlyResource(template, 'AWS::Lambda::EventSourceMapping', {
      EventSourceArn: { 'Fn::GetAtt': [tableId, 'StreamArn'] },
      FunctionName: { Ref: publisherId },
      StartingPosition: 'TRIM_HORIZON',
      FunctionResponseTypes: ['ReportBatchItemFailures'],
      ParallelizationFactor: 1,
      BatchSize: 100,
    });
    const queueUrl = (publisher.Properties.Environment as { Variables: Record<string, unknown> }).Variables
      .OUTCOMES_QUEUE_URL as { Ref: string };
    const queue = template.toJSON().Resources[queueUrl.Ref] as Resource;
    expect(queue.Type).toBe('AWS::SQS::Queue');
    expect(queue.Properties.SqsManagedSseEnabled).toBe(true);
    template.hasOutput('OutcomesQueueUrl', { Value: queueUrl });
    // It sends to its queue, reads the stream and touches nothing else.
    const statements = statementsOf(template, 'Threadgate-outcome-publisher');
    const actions = statements.flatMap(actionsOf);
    expect(actions.filter((a) => a.startsWith('dynamodb:')).sort()).toEqual([
      'dynamodb:DescribeStream',
      'dynamodb:GetRecords',
      'dynamodb:GetShardIterator',
      'dynamodb:ListStreams',
    ]);
    expect(statements.filter((s) => s.Resource === '*').flatMap(actionsOf)).toEqual(['dynamodb:ListStreams']);
    expect(actions.some((a) => a === 'dynamodb:GetItem' || a.startsWith('secretsmanager:'))).toBe(false);
    // Sends go to its queue and to the failure queue (the mapping's on-failure destination) only.
    const [, mapping] = onlyResource(template, 'AWS::Lambda::EventSourceMapping', {
      FunctionName: { Ref: publisherId },
    });
    const failuresId = (
      mapping.Properties.DestinationConfig as { OnFailure: { Destination: { 'Fn::GetAtt': [string] } } }
    ).OnFailure.Destination['Fn::GetAtt'][0];
    const sendTargets = statementsWith(statements, 'sqs:SendMessage').map(
      (st) => (st.Resource as { 'Fn::GetAtt': [string] })['Fn::GetAtt'][0],
    );
    expect(sendTargets.sort()).toEqual([queueUrl.Ref, failuresId].sort());
  });

  it('bounds the outcome stream retries, bisects a failed batch, drops old records and sends what it gives up to an encrypted queue', () => {
    // Prepare
    const [publisherId] = onlyResource(template, 'AWS::Lambda::Function', {
      FunctionName: 'Threadgate-outcome-publisher',
    });
    const [, mapping] = onlyResource(template, 'AWS::Lambda::EventSourceMapping', {
      FunctionName: { Ref: publisherId },
    });
    // Assess: a poison record holds its shard for at most 10 retries or an hour
    template.hasResourceProperties('AWS::Lambda::EventSourceMapping', {
      FunctionName: { Ref: publisherId },
      MaximumRetryAttempts: 10,
      BisectBatchOnFunctionError: true,
      MaximumRecordAgeInSeconds: 3600,
      DestinationConfig: { OnFailure: { Destination: { 'Fn::GetAtt': [Match.anyValue(), 'Arn'] } } },
    });
    const destination = (
      mapping.Properties.DestinationConfig as {
        OnFailure: { Destination: { 'Fn::GetAtt': [string, string] } };
      }
    ).OnFailure.Destination['Fn::GetAtt'][0];
    const failures = template.toJSON().Resources[destination] as Resource;
    expect(failures.Type).toBe('AWS::SQS::Queue');
    expect(failures.Properties).toMatchObject({
      SqsManagedSseEnabled: true,
      MessageRetentionPeriod: 1_209_600,
    });
    // The queue takes only TLS, and the publisher may send to it.
    template.hasResourceProperties('AWS::SQS::QueuePolicy', {
      Queues: [{ Ref: destination }],
      PolicyDocument: {
        Statement: Match.arrayWith([
          Match.objectLike({ Effect: 'Deny', Condition: { Bool: { 'aws:SecureTransport': 'false' } } }),
        ]),
      },
    });
    const sends = statementsWith(statementsOf(template, 'Threadgate-outcome-publisher'), 'sqs:SendMessage');
    expect(sends.map((st) => st.Resource)).toContainEqual({ 'Fn::GetAtt': [destination, 'Arn'] });
    template.hasOutput('OutcomeFailuresQueueUrl', { Value: { Ref: destination } });
  });

  it('alarms on the outcome stream: iterator age, publisher errors and records given up on', () => {
    const [publisherId] = onlyResource(template, 'AWS::Lambda::Function', {
      FunctionName: 'Threadgate-outcome-publisher',
    });
    const publisher = [{ Name: 'FunctionName', Value: { Ref: publisherId } }];
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      AlarmName: 'Threadgate-outcome-stream-iterator-age',
      MetricName: 'IteratorAge',
      Namespace: 'AWS/Lambda',
      Dimensions: publisher,
      Statistic: 'Maximum',
      Threshold: 300_000,
      ComparisonOperator: 'GreaterThanThreshold',
    });
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      AlarmName: 'Threadgate-outcome-publisher-errors',
      MetricName: 'Errors',
      Namespace: 'AWS/Lambda',
      Dimensions: publisher,
      Threshold: 1,
    });
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      AlarmName: 'Threadgate-outcomes-not-published',
      MetricName: 'ApproximateNumberOfMessagesVisible',
      Namespace: 'AWS/SQS',
      Dimensions: [
        { Name: 'QueueName', Value: { 'Fn::GetAtt': [Match.stringLikeRegexp('Failures'), 'QueueName'] } },
      ],
      Threshold: 1,
    });
  });

  it('runs the cap adjuster from an EventBridge rule every minute', () => {
    const [adjusterId] = onlyResource(template, 'AWS::Lambda::Function', {
      FunctionName: 'Threadgate-cap-adjuster',
    });
    template.hasResourceProperties('AWS::Events::Rule', {
      ScheduleExpression: 'rate(1 minute)',
      State: 'ENABLED',
      Targets: [Match.objectLike({ Arn: { 'Fn::GetAtt': [adjusterId, 'Arn'] } })],
    });
    template.hasResourceProperties('AWS::Lambda::Permission', {
      FunctionName: { 'Fn::GetAtt': [adjusterId, 'Arn'] },
      Principal: 'events.amazonaws.com',
    });
    template.resourceCountIs('AWS::Scheduler::Schedule', 0);
  });

  it('creates no SSM parameter: the pipeline state and the lane shape live in the slot ledger, written by the functions', () => {
    template.resourceCountIs('AWS::SSM::Parameter', 0);
    expect(JSON.stringify(template.toJSON())).not.toContain('ssm:');
  });

  it('gives the worker the stack default expect block as FORM_EXPECT, from context JSON or a prop object', () => {
    const block = { body_excludes: ['verification failed'], location: '/thanks' };
    for (const expect_ of [JSON.stringify(block), block]) {
      const { template: t } = synth({ expect: expect_ });
      const [, fn] = onlyResource(t, 'AWS::Lambda::Function', { FunctionName: 'Threadgate-worker' });
      const env = (fn.Properties.Environment as { Variables: Record<string, unknown> }).Variables;
      expect(JSON.parse(String(env.FORM_EXPECT))).toEqual(block);
    }
  });

  it('sets every environment variable of the contract on the worker', () => {
    const [, fn] = onlyResource(template, 'AWS::Lambda::Function', { FunctionName: 'Threadgate-worker' });
    const env = (fn.Properties.Environment as { Variables: Record<string, unknown> }).Variables;
    expect(Object.keys(env).sort()).toEqual(
      [
        'TABLE_NAME',
        'QUEUE_URL',
        'QUEUE_ARN',
        'DLQ_URL',
        'CAPTCHAAI_URL',
        'CAPTCHAAI_SECRET_NAME',
        'TIME_SCALE',
        'ALLOWED_HOSTS',
        'LEASE_SECONDS',
        'QUEUE_VISIBILITY_SECONDS',
        'CHAIN_SECONDS',
        'TRANSIENT_RECEIVE_LIMIT',
        'TARGET_TIMEOUT_MS',
        'COOLDOWN_MS',
        'CAPTCHAAI_POLL_INTERVAL_MS',
        'CAPTCHAAI_FIRST_POLL_MS',
        'CAPTCHAAI_POLL_BUDGET',
        'CAPTCHAAI_POLL_SCHEDULE',
        'CAPTCHAAI_POLL_MEAN_BUDGET',
        'SOLVE_TIMES_TABLE',
        'LEDGER_TABLE',
        'INITIAL_CAP',
        'POWERTOOLS_SERVICE_NAME',
        'POWERTOOLS_METRICS_NAMESPACE',
        'POWERTOOLS_LOG_LEVEL',
        'MALLOC_ARENA_MAX',
        'MALLOC_TRIM_THRESHOLD_',
      ].sort(),
    );
    expect(env).toMatchObject({
      CAPTCHAAI_URL: 'https://ocr.captchaai.com',
      CAPTCHAAI_SECRET_NAME: 'threadgate/captchaai-api-key',
      ALLOWED_HOSTS: HOSTS,
      TIME_SCALE: '1',
      TRANSIENT_RECEIVE_LIMIT: '3',
      // The queue's (6 × the timeout): the worker shortens its event's visibility only below it.
      QUEUE_VISIBILITY_SECONDS: String(6 * 893),
      CAPTCHAAI_POLL_INTERVAL_MS: JSON.stringify(DEFAULT_TIMINGS.pollIntervalMs),
      CAPTCHAAI_FIRST_POLL_MS: JSON.stringify(DEFAULT_TIMINGS.firstPollMs),
      CAPTCHAAI_POLL_BUDGET: '17',
      CAPTCHAAI_POLL_SCHEDULE: 'learned',
      CAPTCHAAI_POLL_MEAN_BUDGET: '12',
      POWERTOOLS_METRICS_NAMESPACE: 'Threadgate',
    });
    // No runtime source maps in the worker: parsing the map at load costs memory every slot pays.
    expect(env.NODE_OPTIONS).toBeUndefined();
    expect(Number(env.LEASE_SECONDS)).toBeGreaterThan(fn.Properties.Timeout as number);
    expect(fn.Properties.MemorySize).toBe(168);
  });

  it('sets every environment variable of the contract on the cap adjuster', () => {
    const [, fn] = onlyResource(template, 'AWS::Lambda::Function', {
      FunctionName: 'Threadgate-cap-adjuster',
    });
    const env = (fn.Properties.Environment as { Variables: Record<string, unknown> }).Variables;
    expect(env).toMatchObject({
      WORKER_FUNCTION_NAME: 'Threadgate-worker',
      QUEUE_ARN: { 'Fn::GetAtt': [expect.stringMatching(/^JobsQueue/), 'Arn'] },
      CAPTCHAAI_URL: 'https://ocr.captchaai.com',
      CAPTCHAAI_SECRET_NAME: 'threadgate/captchaai-api-key',
      TIME_SCALE: '1',
      RESERVE: '1',
      MIN_CAP: '1',
      MAX_CAP: '1000',
      POWERTOOLS_METRICS_NAMESPACE: 'Threadgate',
      LEDGER_TABLE: { Ref: expect.stringMatching(/^SlotLedgerTable/) },
    });
    // One lane: no shape to read, so neither LANES nor the first shape's INITIAL_CAP.
    expect(env.LANES).toBeUndefined();
    expect(env.INITIAL_CAP).toBeUndefined();
  });

  it('lets the worker update only its own mapping and never touch concurrency', () => {
    const [mappingId] = onlyResource(template, 'AWS::Lambda::EventSourceMapping', { BatchSize: 1 });
    const statements = statementsOf(template, 'Threadgate-worker');
    const update = statementsWith(statements, 'lambda:UpdateEventSourceMapping');
    expect(update).toHaveLength(1);
    expect(JSON.stringify(update[0]!.Resource)).toContain(`":event-source-mapping:",{"Ref":"${mappingId}"}`);
    expect(statementsWith(statements, 'lambda:GetEventSourceMapping')[0]!.Resource).toEqual(
      update[0]!.Resource,
    );
    for (const action of ['lambda:PutFunctionConcurrency', 'lambda:DeleteFunctionConcurrency']) {
      expect(statementsWith(statements, action)).toEqual([]);
    }
    // Only ListEventSourceMappings (no resource-level permissions in IAM) gets "*".
    const star = statements.filter((s) => s.Resource === '*');
    expect(star.flatMap(actionsOf)).toEqual(['lambda:ListEventSourceMappings']);
  });

  it("lets the cap adjuster change only the worker's concurrency and mapping", () => {
    const [workerId] = onlyResource(template, 'AWS::Lambda::Function', { FunctionName: 'Threadgate-worker' });
    const [mappingId] = onlyResource(template, 'AWS::Lambda::EventSourceMapping', { BatchSize: 1 });
    const statements = statementsOf(template, 'Threadgate-cap-adjuster');
    for (const action of [
      'lambda:PutFunctionConcurrency',
      'lambda:GetFunctionConcurrency',
      'lambda:DeleteFunctionConcurrency',
    ]) {
      const found = statementsWith(statements, action);
      expect(found, action).toHaveLength(1);
      expect(found[0]!.Resource).toEqual({ 'Fn::GetAtt': [workerId, 'Arn'] });
    }
    const update = statementsWith(statements, 'lambda:UpdateEventSourceMapping');
    expect(update).toHaveLength(1);
    expect(JSON.stringify(update[0]!.Resource)).toContain(`{"Ref":"${mappingId}"}`);
    const star = statements.filter((s) => s.Resource === '*');
    expect(star.flatMap(actionsOf)).toEqual(['lambda:ListEventSourceMappings']);
    // It reads no queue, and of the tables only the slot ledger (the cap, expired leases).
    expect(statements.flatMap(actionsOf).filter((a) => a.startsWith('sqs:'))).toEqual([]);
    const [ledgerId] = onlyResource(template, 'AWS::DynamoDB::Table', {
      KeySchema: [
        { AttributeName: 'pk', KeyType: 'HASH' },
        { AttributeName: 'sk', KeyType: 'RANGE' },
      ],
      TimeToLiveSpecification: Match.absent(),
    });
    expect(
      statements
        .filter((s) => actionsOf(s).some((a) => a.startsWith('dynamodb:')))
        .map((s) => ({ actions: actionsOf(s).sort(), resource: s.Resource })),
    ).toEqual([{ actions: LEDGER_ACTIONS, resource: { 'Fn::GetAtt': [ledgerId, 'Arn'] } }]);
  });

  it.each(['Threadgate-worker', 'Threadgate-cap-adjuster'])(
    '%s reads the API key secret by name only, and calls no SSM (its state is in the slot ledger)',
    (functionName) => {
      const statements = statementsOf(template, functionName);
      const secret = statements.filter((s) => actionsOf(s).some((a) => a.startsWith('secretsmanager:')));
      expect(secret).toHaveLength(1);
      expect(actionsOf(secret[0]!)).toContain('secretsmanager:GetSecretValue');
      expect(JSON.stringify(secret[0]!.Resource)).toContain(':secret:threadgate/captchaai-api-key-??????');
      expect(statements.flatMap(actionsOf).filter((a) => a.startsWith('ssm:'))).toEqual([]);
    },
  );

  it('gives the worker only get/update on its outcomes table, put/query on the solve times, leases on the slot ledger, send on its DLQ and consume on its queue', () => {
    const statements = statementsOf(template, 'Threadgate-worker');
    const dynamo = statements.filter((s) => actionsOf(s).some((a) => a.startsWith('dynamodb:')));
    const [outcomesId] = onlyResource(template, 'AWS::DynamoDB::Table', {
      KeySchema: [{ AttributeName: 'record_key', KeyType: 'HASH' }],
    });
    const [solveTimesId, solveTimes] = onlyResource(template, 'AWS::DynamoDB::Table', {
      KeySchema: [
        { AttributeName: 'pk', KeyType: 'HASH' },
        { AttributeName: 'sk', KeyType: 'RANGE' },
      ],
      TimeToLiveSpecification: { AttributeName: 'expires_at', Enabled: true },
    });
    expect(solveTimes.DeletionPolicy).toBe('Delete');
    const [ledgerId, ledger] = onlyResource(template, 'AWS::DynamoDB::Table', {
      KeySchema: [
        { AttributeName: 'pk', KeyType: 'HASH' },
        { AttributeName: 'sk', KeyType: 'RANGE' },
      ],
      TimeToLiveSpecification: Match.absent(),
    });
    expect(ledger.DeletionPolicy).toBe('Delete');
    expect(
      dynamo
        .map((s) => ({ actions: actionsOf(s).sort(), resource: s.Resource }))
        .sort((a, b) => a.actions[0]!.localeCompare(b.actions[0]!)),
    ).toEqual([
      { actions: LEDGER_ACTIONS, resource: { 'Fn::GetAtt': [ledgerId, 'Arn'] } },
      {
        actions: ['dynamodb:GetItem', 'dynamodb:UpdateItem'],
        resource: { 'Fn::GetAtt': [outcomesId, 'Arn'] },
      },
      { actions: ['dynamodb:PutItem', 'dynamodb:Query'], resource: { 'Fn::GetAtt': [solveTimesId, 'Arn'] } },
    ]);
    const [queueId, queue] = onlyResource(template, 'AWS::SQS::Queue', { RedrivePolicy: Match.anyValue() });
    const dlqArn = (queue.Properties.RedrivePolicy as { deadLetterTargetArn: unknown }).deadLetterTargetArn;
    expect(statementsWith(statements, 'sqs:SendMessage').map((s) => s.Resource)).toEqual([dlqArn]);
    expect(statementsWith(statements, 'sqs:ReceiveMessage').map((s) => s.Resource)).toEqual([
      { 'Fn::GetAtt': [queueId, 'Arn'] },
    ]);
  });

  it('attaches no managed policies and grants no wildcard actions', () => {
    for (const [, role] of Object.entries(template.findResources('AWS::IAM::Role')) as [string, Resource][]) {
      expect(role.Properties.ManagedPolicyArns).toBeUndefined();
    }
    const all = [
      ...statementsOf(template, 'Threadgate-worker'),
      ...statementsOf(template, 'Threadgate-cap-adjuster'),
    ];
    expect(all.flatMap(actionsOf).filter((a) => a.includes('*'))).toEqual([]);
  });

  it('holds no secret value: no secret resource, no key-like variables, the key only by secret name', () => {
    template.resourceCountIs('AWS::SecretsManager::Secret', 0);
    for (const [, fn] of Object.entries(template.findResources('AWS::Lambda::Function')) as [
      string,
      Resource,
    ][]) {
      const names = Object.keys(
        (fn.Properties.Environment as { Variables: Record<string, unknown> }).Variables,
      );
      expect(names.filter((n) => /KEY|TOKEN|PASSWORD/.test(n) && n !== 'CAPTCHAAI_SECRET_NAME')).toEqual([]);
    }
    expect(json).not.toMatch(/apiKey|api_key/i);
  });

  it('refers to no resource type moto skips (alarms, schedules, secrets, queue policies)', () => {
    const resources = template.toJSON().Resources as Record<string, Resource>;
    const skipped = new Set(
      Object.entries(resources)
        .filter(([, r]) =>
          [
            'AWS::CloudWatch::Alarm',
            'AWS::Scheduler::Schedule',
            'AWS::SecretsManager::Secret',
            'AWS::SQS::QueuePolicy',
          ].includes(r.Type),
        )
        .map(([id]) => id),
    );
    expect(skipped.size).toBeGreaterThan(0);
    const referenced = new Set<string>();
    const walk = (node: unknown): void => {
      if (Array.isArray(node)) node.forEach(walk);
      else if (node && typeof node === 'object') {
        for (const [k, v] of Object.entries(node)) {
          if (k === 'Ref' && typeof v === 'string') referenced.add(v);
          else if (k === 'Fn::GetAtt' && Array.isArray(v)) referenced.add(String(v[0]));
          else walk(v);
        }
      }
    };
    walk({ resources, outputs: template.toJSON().Outputs });
    for (const r of Object.values(resources)) walk((r as { DependsOn?: unknown }).DependsOn ?? []);
    expect([...skipped].filter((id) => referenced.has(id))).toEqual([]);
  });

  it("alarms on a non-empty DLQ, a paused pipeline, old jobs, adjuster errors and the worker's own errors", () => {
    template.resourceCountIs('AWS::CloudWatch::Alarm', 8); // these 5 and the outcome stream's 3
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      MetricName: 'ApproximateNumberOfMessagesVisible',
      Namespace: 'AWS/SQS',
      Threshold: 1,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
    });
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      MetricName: 'PipelinePaused',
      Namespace: 'Threadgate',
      Dimensions: [{ Name: 'service', Value: 'Threadgate' }],
      Threshold: 1,
    });
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      MetricName: 'ApproximateAgeOfOldestMessage',
      Threshold: 3600,
    });
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      MetricName: 'Errors',
      Namespace: 'AWS/Lambda',
      Dimensions: [{ Name: 'FunctionName', Value: { Ref: Match.stringLikeRegexp('^CapAdjusterFunction') } }],
    });
  });

  it('alarms on any worker invocation that crashed, ran out of memory or timed out: its Errors, not its throttles', () => {
    template.hasResourceProperties('AWS::CloudWatch::Alarm', {
      AlarmName: 'Threadgate-worker-errors',
      Namespace: 'AWS/Lambda',
      MetricName: 'Errors',
      Dimensions: [{ Name: 'FunctionName', Value: { Ref: Match.stringLikeRegexp('^WorkerFunction') } }],
      Statistic: 'Sum',
      Period: 300,
      Threshold: 1,
      EvaluationPeriods: 1,
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      TreatMissingData: 'notBreaching',
    });
    const onWorker = Object.values(template.findResources('AWS::CloudWatch::Alarm')).filter((a) =>
      JSON.stringify(a.Properties.Dimensions ?? []).includes('WorkerFunction'),
    );
    expect(onWorker.map((a) => a.Properties.MetricName)).toEqual(['Errors']);
  });

  it('puts in flight, cap, plan and working threads, queue and DLQ depth and outcomes on the dashboard', () => {
    const [, dashboard] = onlyResource(template, 'AWS::CloudWatch::Dashboard');
    // The body is a Fn::Join of JSON text and references; stand the references in as strings.
    const parts = (dashboard.Properties.DashboardBody as { 'Fn::Join': [string, unknown[]] })['Fn::Join'][1];
    const body = JSON.parse(parts.map((p) => (typeof p === 'string' ? p : 'REF')).join('')) as {
      widgets: { properties: { metrics: unknown[][] } }[];
    };
    const shown = body.widgets.flatMap((w) =>
      w.properties.metrics.map((m) =>
        typeof m[0] === 'string' ? `${m[0]}/${m[1]}` : String((m[0] as { expression: string }).expression),
      ),
    );
    for (const metric of [
      'AWS/Lambda/ConcurrentExecutions',
      'Threadgate/Cap',
      'Threadgate/PlanThreads',
      'Threadgate/WorkingThreads',
      'Threadgate/ExternalThreadsBusy',
      'Threadgate/CapClampedByMax',
      'AWS/SQS/ApproximateNumberOfMessagesVisible',
      'Threadgate/SolveTime',
      'Threadgate/PipelinePaused',
      'AWS/Lambda/IteratorAge',
    ]) {
      expect(shown, metric).toContain(metric);
    }
    // Jobs queue, DLQ and the outcome stream's failure queue.
    expect(shown.filter((m) => m.startsWith('AWS/SQS/ApproximateNumberOfMessagesVisible'))).toHaveLength(3);
    expect(shown.some((m) => m.startsWith('SEARCH(') && m.includes('MetricName="Outcomes"'))).toBe(true);
  });

  it('exports every output the CLI and the local runtime read', () => {
    expect(Object.keys(template.toJSON().Outputs).sort()).toEqual(
      [
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
        'OutcomesQueueUrl',
        'OutcomeFailuresQueueUrl',
      ].sort(),
    );
    template.hasOutput('SecretName', { Value: 'threadgate/captchaai-api-key' });
    const [mappingId] = onlyResource(template, 'AWS::Lambda::EventSourceMapping', { BatchSize: 1 });
    template.hasOutput('MappingUuid', { Value: { Ref: mappingId } });
  });
});

describe('ThreadgateStack with other settings', () => {
  it('leaves out the outcome stream (queue, publisher, mapping, table stream, output) with outcomeStream=false', () => {
    // Prepare / Act: as CDK context gives it, a string
    const { template } = synth({ outcomeStream: 'false' });
    // Assess
    template.resourceCountIs('AWS::Lambda::EventSourceMapping', 1);
    template.resourceCountIs('AWS::Lambda::Function', 2);
    template.resourceCountIs('AWS::SQS::Queue', 2);
    template.resourceCountIs('AWS::CloudWatch::Alarm', 5);
    template.hasResourceProperties('AWS::DynamoDB::Table', { StreamSpecification: Match.absent() });
    expect(Object.keys(template.toJSON().Outputs)).not.toContain('OutcomesQueueUrl');
    expect(Object.keys(template.toJSON().Outputs)).not.toContain('OutcomeFailuresQueueUrl');
  });

  it.each([
    [1, '1000'],
    [16, '16000'],
  ])('gives the adjuster a maxCap of 1000 × lanes by default (lanes %i: %s)', (lanes, maxCap) => {
    // Prepare / Act
    const { template } = synth({ lanes });
    // Assess
    template.hasResourceProperties('AWS::Lambda::Function', {
      FunctionName: 'Threadgate-cap-adjuster',
      Environment: { Variables: Match.objectLike({ MAX_CAP: maxCap }) },
    });
  });

  it('moves the bill by its cost settings: log level, outcome TTL, table encryption, stream batching', () => {
    // Prepare / Act
    const defaults = synth().template;
    const { template } = synth({
      logLevel: 'warn',
      outcomeRetentionDays: 90,
      tableEncryption: 'aws-owned',
      outcomeStreamBatchingSeconds: 5,
    });
    // Assess: every function logs at the level; the worker writes the TTL the table reads.
    const levels = (t: Template) =>
      Object.values(t.findResources('AWS::Lambda::Function')).map(
        (f) => (f as Resource).Properties.Environment as { Variables: Record<string, string> },
      );
    expect(levels(defaults).map((e) => e.Variables.POWERTOOLS_LOG_LEVEL)).toEqual(['INFO', 'INFO', 'INFO']);
    expect(levels(template).map((e) => e.Variables.POWERTOOLS_LOG_LEVEL)).toEqual(['WARN', 'WARN', 'WARN']);
    template.hasResourceProperties('AWS::Lambda::Function', {
      FunctionName: 'Threadgate-worker',
      Environment: { Variables: Match.objectLike({ OUTCOME_RETENTION_DAYS: '90' }) },
    });
    defaults.hasResourceProperties('AWS::Lambda::Function', {
      FunctionName: 'Threadgate-worker',
      Environment: { Variables: Match.objectLike({ OUTCOME_RETENTION_DAYS: Match.absent() }) },
    });
    for (const t of [defaults, template]) {
      t.hasResourceProperties('AWS::DynamoDB::Table', {
        KeySchema: [{ AttributeName: 'record_key', KeyType: 'HASH' }],
        TimeToLiveSpecification: { AttributeName: 'expires_at', Enabled: true },
      });
    }
    // aws/dynamodb on every table by default; none names a KMS key with aws-owned.
    const sse = (t: Template) =>
      Object.values(t.findResources('AWS::DynamoDB::Table')).map(
        (r) => (r as Resource).Properties.SSESpecification as { SSEEnabled?: boolean } | undefined,
      );
    expect(sse(defaults).every((s) => s?.SSEEnabled === true)).toBe(true);
    expect(sse(template).every((s) => s?.SSEEnabled !== true)).toBe(true);
    template.hasResourceProperties('AWS::Lambda::EventSourceMapping', {
      StartingPosition: 'TRIM_HORIZON',
      MaximumBatchingWindowInSeconds: 5,
    });
    defaults.hasResourceProperties('AWS::Lambda::EventSourceMapping', {
      StartingPosition: 'TRIM_HORIZON',
      MaximumBatchingWindowInSeconds: Match.absent(),
    });
  });

  it('gives both functions, with lanes, LANES and the INITIAL_CAP of the first shape they read until the adjuster publishes one', () => {
    // Prepare / Act
    const { template } = synth({ lanes: 8, initialCap: 24 });
    // Assess
    for (const FunctionName of ['Threadgate-worker', 'Threadgate-cap-adjuster']) {
      template.hasResourceProperties('AWS::Lambda::Function', {
        FunctionName,
        Environment: { Variables: Match.objectLike({ LANES: '8', INITIAL_CAP: '24' }) },
      });
    }
  });

  it('accepts a maxCap above 1000 with lanes, up to 1000 × lanes', () => {
    // Prepare / Act
    const { template } = synth({ lanes: 8, maxCap: 8000 });
    // Assess
    template.hasResourceProperties('AWS::Lambda::Function', {
      FunctionName: 'Threadgate-cap-adjuster',
      Environment: { Variables: Match.objectLike({ MAX_CAP: '8000', LANES: '8' }) },
    });
  });

  it('holds a cap of 1 by reserved concurrency alone, without a mapping maximum', () => {
    // Prepare / Act
    const { template } = synth({ initialCap: 1, minCap: 1 });
    // Assess
    template.hasResourceProperties('AWS::Lambda::Function', {
      FunctionName: 'Threadgate-worker',
      ReservedConcurrentExecutions: 1,
    });
    template.hasResourceProperties('AWS::Lambda::EventSourceMapping', {
      BatchSize: 1,
      ScalingConfig: Match.absent(),
    });
  });

  it('takes its settings from CDK context, as strings', () => {
    const app = new App({
      context: {
        'aws:cdk:bundling-stacks': [],
        stackName: 'Tg-staging',
        reserve: '2',
        initialCap: '7',
        allowedHosts: 'a.example.com',
        timeScale: '0.01',
        cooldownMs: '500',
        targetTimeoutMs: '1000',
        captchaaiUrl: 'http://localhost:4010/',
        secretName: 'tg/key',
      },
    });
    const stack = new ThreadgateStack(app, 'Tg-staging');
    const template = Template.fromStack(stack);
    // The worker's worst case at these settings: CaptchaAI's waits × 0.01, its HTTP calls at their
    // 2 s real-time floor, the 1 s target calls, the 0.5 s cool-down and the real-time allowances.
    // Plus the chain's 120 s × 0.01, rounded up.
    const timeout =
      Math.ceil(worstCaseRecordMs({ timeScale: 0.01, targetTimeoutMs: 1000, cooldownMs: 500 }) / 1000) + 2;
    expect(timeout).toBeGreaterThan(60);
    template.hasResourceProperties('AWS::Lambda::Function', {
      FunctionName: 'Tg-staging-worker',
      ReservedConcurrentExecutions: 7,
      Timeout: timeout,
      Environment: {
        Variables: Match.objectLike({
          CAPTCHAAI_URL: 'http://localhost:4010',
          CAPTCHAAI_SECRET_NAME: 'tg/key',
          TIME_SCALE: '0.01',
          ALLOWED_HOSTS: 'a.example.com',
          POWERTOOLS_SERVICE_NAME: 'Tg-staging',
        }),
      },
    });
    template.hasResourceProperties('AWS::Lambda::Function', {
      FunctionName: 'Tg-staging-cap-adjuster',
      Environment: {
        Variables: Match.objectLike({ RESERVE: '2', WORKER_FUNCTION_NAME: 'Tg-staging-worker' }),
      },
    });
    template.hasResourceProperties('AWS::SQS::Queue', { VisibilityTimeout: 6 * timeout });
  });

  it('bundles each handler with all its dependencies inside the asset', () => {
    // Prepare / Act
    const { app } = synth({}, { bundle: true });
    const assembly = app.synth();
    const template = assembly.getStackByName('Threadgate').template as {
      Resources: Record<string, Resource>;
    };
    // Assess
    const fns = Object.values(template.Resources).filter((r) => r.Type === 'AWS::Lambda::Function');
    expect(fns).toHaveLength(3);
    for (const fn of fns) {
      const assetPath = (fn as unknown as { Metadata: Record<string, string> }).Metadata['aws:asset:path']!;
      const code = readFileSync(join(assembly.directory, assetPath, 'index.js'), 'utf8');
      expect(existsSync(join(assembly.directory, assetPath, 'index.js.map'))).toBe(true);
      expect(code).toContain('handler');
      // Nothing left to resolve from node_modules at run time (node: built-ins only).
      const requires = [...code.matchAll(/require\("([^"]+)"\)/g)].map((m) => m[1]!);
      // The SDK's optional CRT signer (SigV4a only) is required inside a try; it may stay outside.
      const optional = new Set(['@aws-sdk/signature-v4-crt']);
      const external = requires.filter(
        // node:-prefixed modules are built in (node:sqlite is prefix-only, so not in this Node's list).
        (r) => !r.startsWith('node:') && !builtinModules.includes(r) && !optional.has(r),
      );
      expect(external).toEqual([]);
    }
  });
});

describe('cdk-nag (AwsSolutions)', () => {
  it('finds nothing unacknowledged in the stack', () => {
    // Prepare
    const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
    new ThreadgateStack(app, 'Threadgate', { settings: { allowedHosts: HOSTS } });
    Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
    // Act / Assess
    expect(() => app.synth()).not.toThrow();
  });

  it('fails synth when a finding is not acknowledged', () => {
    // Prepare: a wildcard grant no acknowledgement covers.
    const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
    const stack = new ThreadgateStack(app, 'Threadgate', { settings: { allowedHosts: HOSTS } });
    stack.worker.role.addToPrincipalPolicy(
      new iam.PolicyStatement({ actions: ['s3:GetObject'], resources: ['*'] }),
    );
    Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
    // Act / Assess
    expect(() => app.synth()).toThrow(/AwsSolutions-IAM5\[Resource::\*\]/);
  });
});

describe('settings validation at synth time', () => {
  it.each<[string, ThreadgateSettings, RegExp]>([
    ['reserve', { reserve: -1 }, /^reserve: must be >= 0/],
    ['reserve', { reserve: 'two' }, /^reserve: must be a number/],
    ['minCap', { minCap: 0 }, /^minCap: must be >= 1/],
    ['minCap', { minCap: 10, maxCap: 5 }, /^minCap: must be <= maxCap/],
    [
      'maxCap',
      { maxCap: 1001 },
      /^maxCap: must be <= 1000 \(1000 invocations, the mapping's limit, × lanes 1\)/,
    ],
    ['maxCap', { lanes: 16, maxCap: 16_001 }, /^maxCap: must be <= 16000 \(1000 invocations.* × lanes 16\)/],
    [
      'initialCap',
      { initialCap: 50, maxCap: 20 },
      /^initialCap: must be between minCap \(1\) and maxCap \(20\)/,
    ],
    ['initialCap', { initialCap: 2.5 }, /^initialCap: must be a whole number/],
    ['allowedHosts', { allowedHosts: 'ok.example.com,http://bad' }, /^allowedHosts: "http:\/\/bad"/],
    [
      'captchaaiUrl',
      { captchaaiUrl: 'ocr.captchaai.com' },
      /^captchaaiUrl: must be an absolute http\(s\) URL/,
    ],
    ['captchaaiUrl', { captchaaiUrl: 'ftp://x' }, /^captchaaiUrl: must be an http\(s\) URL/],
    ['secretName', { secretName: 'arn:aws:secretsmanager:us-east-1:1:secret:x' }, /^secretName: /],
    ['stackName', { stackName: '1bad_name' }, /^stackName: must start with a letter/],
    ['timeScale', { timeScale: 0 }, /^timeScale: must be >= /],
    ['timeScale', { timeScale: 3 }, /^timeScale: the worst-case attempt .* exceeds Lambda's 900 s limit/],
    [
      'workerTimeoutSeconds',
      { workerTimeoutSeconds: 60 },
      /^workerTimeoutSeconds: must cover the worst-case attempt of \d+ s/,
    ],
    ['workerTimeoutSeconds', { workerTimeoutSeconds: 901 }, /^workerTimeoutSeconds: must be <= 900/],
    ['maxReceiveCount', { maxReceiveCount: 4 }, /^maxReceiveCount: must be >= 5/],
    [
      'transientReceiveLimit',
      { transientReceiveLimit: 5 },
      /^transientReceiveLimit: must be below maxReceiveCount \(5\)/,
    ],
    ['leaseSeconds', { leaseSeconds: 100 }, /^leaseSeconds: must exceed workerTimeoutSeconds/],
    [
      'visibilityTimeoutSeconds',
      { visibilityTimeoutSeconds: 100 },
      /^visibilityTimeoutSeconds: must be at least workerTimeoutSeconds/,
    ],
    [
      'dnsServers',
      { dnsServers: 'resolver.example.com' },
      /^dnsServers: "resolver.example.com" is not an IP address/,
    ],
    ['logRetentionDays', { logRetentionDays: 4 }, /^logRetentionDays: must be one of/],
    ['alarmTopicArn', { alarmTopicArn: 'my-topic' }, /^alarmTopicArn: must be an SNS topic ARN/],
    ['outcomeStream', { outcomeStream: 'no' }, /^outcomeStream: must be true or false/],
    [
      'logLevel',
      { logLevel: 'verbose' },
      /^logLevel: must be one of DEBUG, INFO, WARN, ERROR, got "verbose"/,
    ],
    ['outcomeRetentionDays', { outcomeRetentionDays: -1 }, /^outcomeRetentionDays: must be >= 0/],
    [
      'tableEncryption',
      { tableEncryption: 'kms' },
      /^tableEncryption: must be one of aws-managed, aws-owned/,
    ],
    [
      'outcomeStreamBatchingSeconds',
      { outcomeStreamBatchingSeconds: 301 },
      /^outcomeStreamBatchingSeconds: must be <= 300/,
    ],
    [
      'pollIntervalMs',
      { pollIntervalMs: 100 },
      /^pollIntervalMs: recaptcha_v2 must be .* within 500\.\.60000/,
    ],
    [
      'pollIntervalMs',
      { pollIntervalMs: '{"hcaptcha":1000}' },
      /^pollIntervalMs: unknown CAPTCHA type "hcaptcha"/,
    ],
    ['pollBudget', { pollBudget: 25 }, /^pollBudget: must be <= 19/],
    ['pollSchedule', { pollSchedule: 'fast' }, /^pollSchedule: must be "learned" or "static"/],
    ['pollMeanBudget', { pollMeanBudget: 0 }, /^pollMeanBudget: must be >= 1/],
    ['workerMemoryMb', { workerMemoryMb: 64 }, /^workerMemoryMb: must be >= 128/],
    ['expect', { expect: '{"status":[500]}' }, /^expect: status\.0: must be between 200 and 399/],
    ['expect', { expect: 'body_excludes=failed' }, /^expect: must be a JSON object/],
  ])('rejects a bad %s with an error naming it', (setting, settings, message) => {
    // Act
    const attempt = () =>
      new ThreadgateStack(new App(), 'Threadgate', { settings: { allowedHosts: HOSTS, ...settings } });
    // Assess
    expect(attempt).toThrow(ConfigError);
    expect(attempt).toThrow(message);
    try {
      attempt();
    } catch (err) {
      expect((err as ConfigError).setting).toBe(setting);
    }
  });

  it('documents a default for every setting (only the allowlist and the alarm topic start empty)', () => {
    const config = resolveConfig({});
    expect(config).toMatchObject({
      stackName: 'Threadgate',
      reserve: 1,
      initialCap: 4,
      minCap: 1,
      maxCap: 1000,
      allowedHosts: [],
      captchaaiUrl: 'https://ocr.captchaai.com',
      secretName: 'threadgate/captchaai-api-key',
      timeScale: 1,
      maxReceiveCount: 5,
      transientReceiveLimit: 3,
      alarmTopicArn: undefined,
    });
  });
});
