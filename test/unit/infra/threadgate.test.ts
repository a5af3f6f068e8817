import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { LambdaClient } from '@aws-sdk/client-lambda';
import { App, Stack, Validations } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as iam from 'aws-cdk-lib/aws-iam';
import { AwsSolutionsChecks } from 'cdk-nag';
import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../../functions/common/errors.js';
import { PipelineControl } from '../../../functions/pipeline/control.js';
import { STATE_ITEM_KEY } from '../../../functions/pipeline/state-item.js';
import { BatchCancels, CANCEL_ITEM_ATTRIBUTES } from '../../../functions/records/cancellations.js';
import { resolveConfig } from '../../../infra/config.js';
import { STACK_OUTPUT_KEYS } from '../../../infra/outputs.js';
import { VERSION } from '../../../infra/package-root.js';
import { Threadgate } from '../../../infra/threadgate.js';
import { ThreadgateStack } from '../../../infra/threadgate-stack.js';
import { deliveryInvariants, type TemplateJson } from '../../fixtures/template-invariants.js';

type Statement = { Action: string | string[]; Resource: unknown };

const HOSTS = ['forms.example.com'];

/** A consumer's stack: a Threadgate beside the consumer's own role (bundling skipped: fast). */
function consumer(props: ConstructorParameters<typeof Threadgate>[2] = { allowedHosts: HOSTS }) {
  const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
  const stack = new Stack(app, 'Consumer');
  const gate = new Threadgate(stack, 'Gate', props);
  const role = new iam.Role(stack, 'JobRole', {
    assumedBy: new iam.ServicePrincipal('ecs-tasks.amazonaws.com'),
  });
  return { app, stack, gate, role };
}

/** Every action the role's policies allow, with the resources as JSON. */
function grantsOf(stack: Stack, roleId = 'JobRole'): Map<string, string> {
  const template = Template.fromStack(stack).toJSON() as TemplateJson;
  const logicalId = stack.getLogicalId(stack.node.findChild(roleId).node.defaultChild as never);
  const out = new Map<string, string>();
  for (const r of Object.values(template.Resources)) {
    if (r.Type !== 'AWS::IAM::Policy') continue;
    if (JSON.stringify(r.Properties.Roles) !== JSON.stringify([{ Ref: logicalId }])) continue;
    for (const s of (r.Properties.PolicyDocument as { Statement: Statement[] }).Statement) {
      for (const a of Array.isArray(s.Action) ? s.Action : [s.Action]) {
        out.set(a, `${out.get(a) ?? ''}${JSON.stringify(s.Resource)}`);
      }
    }
  }
  return out;
}

/** The role's statements on the slot ledger's table (the state item's grants). */
function stateStatements(stack: Stack, roleId: string): unknown[] {
  const template = Template.fromStack(stack).toJSON() as TemplateJson;
  const logicalId = stack.getLogicalId(stack.node.findChild(roleId).node.defaultChild as never);
  return Object.values(template.Resources)
    .filter((r) => r.Type === 'AWS::IAM::Policy')
    .filter((r) => JSON.stringify(r.Properties.Roles) === JSON.stringify([{ Ref: logicalId }]))
    .flatMap((r) => (r.Properties.PolicyDocument as { Statement: Statement[] }).Statement)
    .filter((s) => JSON.stringify(s.Resource).includes('SlotLedgerTable'));
}

/** One statement of the state item's grants: `action` on the ledger table, under the item's key and `attributes`. */
function stateStatement(stack: Stack, gate: Threadgate, action: string, attributes: string[]) {
  return {
    Effect: 'Allow',
    Action: action,
    Resource: {
      'Fn::GetAtt': [stack.getLogicalId(gate.parts.ledger.table.node.defaultChild as never), 'Arn'],
    },
    Condition: {
      'ForAllValues:StringEquals': {
        'dynamodb:LeadingKeys': ['pipeline'],
        'dynamodb:Attributes': attributes,
      },
      StringEqualsIfExists: { 'dynamodb:Select': 'SPECIFIC_ATTRIBUTES', 'dynamodb:ReturnValues': 'NONE' },
    },
  };
}

describe('Threadgate construct in a consumer stack', () => {
  it('builds what ThreadgateStack builds: the same cap, DLQ and delivery invariants and outputs', () => {
    const { stack } = consumer();
    const repo = new ThreadgateStack(new App({ context: { 'aws:cdk:bundling-stacks': [] } }), 'Threadgate', {
      settings: { allowedHosts: HOSTS },
    });
    const mine = deliveryInvariants(Template.fromStack(stack).toJSON() as TemplateJson);
    expect(mine).toEqual(deliveryInvariants(Template.fromStack(repo).toJSON() as TemplateJson));
    expect(mine.outputKeys).toEqual(expect.arrayContaining([...STACK_OUTPUT_KEYS]));
    // Names come from the enclosing stack.
    Template.fromStack(stack).hasResourceProperties('AWS::Lambda::Function', {
      FunctionName: 'Consumer-worker',
    });
  });

  it('exposes the queue, DLQ, table, outcomes queue and worker, and the validated settings', () => {
    const { gate } = consumer({ allowedHosts: HOSTS, reserve: 2, pollIntervalMs: { turnstile: 1500 } });
    expect(gate.jobsQueue.node.path).toBe('Consumer/Gate/Jobs/Queue');
    expect(gate.deadLetterQueue.node.path).toBe('Consumer/Gate/Jobs/Dlq');
    expect(gate.outcomesTable.node.path).toBe('Consumer/Gate/Outcomes/Table');
    expect(gate.outcomesQueue?.node.path).toBe('Consumer/Gate/OutcomeStream/Queue');
    expect(gate.worker.node.path).toBe('Consumer/Gate/Worker/Worker/Function');
    expect(gate.config.reserve).toBe(2);
    expect(gate.config.pollIntervalMs).toEqual({ ...resolveConfig().pollIntervalMs, turnstile: 1500 });
  });

  it('refuses a bad prop at synth with the error that names the setting', () => {
    expect(() => consumer({ reserve: -1 })).toThrow(ConfigError);
    expect(() => consumer({ reserve: -1 })).toThrow(/^reserve: must be >= 0/);
    expect(() => consumer({ allowedHosts: ['*.com'] })).toThrow(/^allowedHosts/);
  });

  it('has no outcomes queue with outcomeStream: false, and then refuses grantConsumeOutcomeStream', () => {
    const { gate, role } = consumer({ allowedHosts: HOSTS, outcomeStream: false });
    expect(gate.outcomesQueue).toBeUndefined();
    expect(() => gate.grantConsumeOutcomeStream(role)).toThrow(/outcomeStream: false/);
  });

  it('grants a job role sending to the jobs queue only', () => {
    const { stack, gate, role } = consumer();
    gate.grantSendJobs(role);
    const grants = grantsOf(stack);
    expect([...grants.keys()].sort()).toEqual([
      'sqs:GetQueueAttributes',
      'sqs:GetQueueUrl',
      'sqs:SendMessage',
    ]);
    expect(grants.get('sqs:SendMessage')).toContain(
      stack.getLogicalId(gate.jobsQueue.node.defaultChild as never),
    );
  });

  it('grants reading outcomes (the table and its batch index) and consuming the outcomes queue', () => {
    const { stack, gate, role } = consumer();
    gate.grantReadOutcomes(role);
    gate.grantConsumeOutcomeStream(role);
    const grants = grantsOf(stack);
    for (const a of ['dynamodb:Query', 'dynamodb:GetItem', 'dynamodb:BatchGetItem', 'dynamodb:Scan']) {
      expect(grants.get(a)).toContain('/index/batch_shard-status_at');
    }
    expect(grants.get('sqs:ReceiveMessage')).toContain(
      stack.getLogicalId(gate.outcomesQueue!.node.defaultChild as never),
    );
    expect(grants.has('dynamodb:PutItem')).toBe(false);
  });

  it('grants a producer what the Python package calls: send, stack_outputs, wait with state_table, outcome reads', () => {
    const { stack, gate, role } = consumer();
    gate.grantProduce(role);
    const grants = grantsOf(stack);
    expect([...grants.keys()].sort()).toEqual([
      'cloudformation:DescribeStacks',
      'dynamodb:BatchGetItem',
      'dynamodb:DescribeTable',
      'dynamodb:GetItem',
      'dynamodb:Query',
      'dynamodb:Scan',
      'sqs:GetQueueAttributes',
      'sqs:GetQueueUrl',
      'sqs:SendMessage',
    ]);
    expect(stateStatements(stack, 'JobRole')).toEqual([
      stateStatement(stack, gate, 'dynamodb:GetItem', ['pk', 'sk', 'state']),
    ]);
    expect(grants.get('cloudformation:DescribeStacks')).toBe('{"Ref":"AWS::StackId"}');
    expect(grants.get('dynamodb:Query')).toContain('/index/batch_shard-status_at');
  });

  it('grants an operator what status, pause, resume and redrive call, and no wildcard resource', () => {
    const { stack, gate, role } = consumer();
    gate.grantOperate(role);
    const grants = grantsOf(stack);
    for (const a of [
      'cloudformation:DescribeStacks',
      'lambda:GetFunctionConfiguration',
      'lambda:GetFunctionConcurrency',
      'lambda:GetEventSourceMapping',
      'lambda:UpdateEventSourceMapping',
      'dynamodb:GetItem',
      'dynamodb:UpdateItem',
      'sqs:GetQueueAttributes',
      'sqs:ReceiveMessage',
      'sqs:DeleteMessage',
      'sqs:ChangeMessageVisibility',
      'sqs:StartMessageMoveTask',
      'sqs:ListMessageMoveTasks',
      'sqs:SendMessage',
      'dynamodb:Scan',
      'dynamodb:Query',
      'secretsmanager:GetSecretValue',
    ]) {
      expect(grants.has(a), a).toBe(true);
    }
    expect([...grants.values()].some((r) => r === '"*"')).toBe(false);
    expect(grants.has('lambda:PutFunctionConcurrency')).toBe(false);
    expect(grants.has('lambda:ListEventSourceMappings')).toBe(false);
    expect([...grants.keys()].some((a) => a.startsWith('ssm:'))).toBe(false);
  });

  it('grants the state item alone (LeadingKeys "pipeline", its attributes): an operator reads state and shape and writes the state, on any lanes', () => {
    for (const lanes of [1, 16]) {
      const { stack, gate, role } = consumer({ allowedHosts: HOSTS, lanes });
      gate.grantOperate(role);
      expect(stateStatements(stack, 'JobRole')).toEqual([
        stateStatement(stack, gate, 'dynamodb:GetItem', ['pk', 'sk', 'state', 'shape']),
        stateStatement(stack, gate, 'dynamodb:UpdateItem', ['pk', 'sk', 'state']),
      ]);
    }
  });

  it('lets pause, resume, status and wait work within the state grants: each request names only the granted attributes, returning none', async () => {
    // Prepare: a client that records each request (GetItem answers an empty item).
    const requests: Record<string, unknown>[] = [];
    const record = {
      send: async (command: { input: Record<string, unknown>; constructor: { name: string } }) => {
        requests.push({ command: command.constructor.name, ...command.input });
        return {};
      },
    };
    const control = new PipelineControl({
      lambda: record as unknown as LambdaClient,
      dynamodb: record as unknown as DynamoDBClient,
      ledgerTable: 'L',
      workerFunctionName: 'w',
      queueArn: 'q',
      mappingUuid: 'm',
      firstShape: { cap: 4, r: 2, L: 2, since: 0 },
    });
    // Act
    await control.readState();
    await control.readShape();
    await control.pause('why', 'operator');
    await control.resume('operator');
    // Assess: GetItem of state, or of shape (status reads both), UpdateItem of state alone
    const items = requests.filter((r) => String(r.command).endsWith('ItemCommand')) as Array<{
      command: string;
      Key: Record<string, unknown>;
      ExpressionAttributeNames: Record<string, string>;
      ReturnValues?: string;
      Select?: string;
    }>;
    expect(items.map((r) => r.command)).toEqual([
      'GetItemCommand',
      'GetItemCommand',
      'UpdateItemCommand',
      'UpdateItemCommand',
    ]);
    for (const r of items) {
      expect(r.Key).toEqual({ pk: { S: STATE_ITEM_KEY.pk }, sk: { S: STATE_ITEM_KEY.sk } });
      const named = [...Object.keys(r.Key), ...Object.values(r.ExpressionAttributeNames)];
      const granted = r.command === 'GetItemCommand' ? ['pk', 'sk', 'state', 'shape'] : ['pk', 'sk', 'state'];
      expect(named.every((a) => granted.includes(a))).toBe(true);
      expect([r.ReturnValues, r.Select]).toEqual([undefined, undefined]);
    }
  });

  it('grants cancelling batches only on their cancel items (LeadingKeys), to an operator for every batch and to a producer for its own prefix', () => {
    const { stack, gate, role } = consumer();
    const producer = new iam.Role(stack, 'ProducerRole', {
      assumedBy: new iam.ServicePrincipal('ecs-tasks.amazonaws.com'),
    });
    gate.grantOperate(role);
    gate.grantCancelBatches(producer, 'nightly-');
    const statements = Template.fromStack(stack).toJSON().Resources as Record<
      string,
      {
        Type: string;
        Properties: {
          Roles?: unknown[];
          PolicyDocument?: { Statement: Array<Statement & { Condition?: unknown }> };
        };
      }
    >;
    const cancelStatements = (roleId: string) =>
      Object.values(statements)
        .filter((r) => r.Type === 'AWS::IAM::Policy' && JSON.stringify(r.Properties.Roles).includes(roleId))
        .flatMap((r) => r.Properties.PolicyDocument?.Statement ?? [])
        .filter((st) => [st.Action].flat().includes('dynamodb:PutItem'));
    // Only the cancel item's own attributes, as AWS documents attribute-level access: a producer
    // cannot write `status` or `batch_id` on a cancel item (it would join that batch's index and
    // end its waits as too_many), nor read or return any other attribute.
    const attributes = {
      'ForAllValues:StringEquals': {
        'dynamodb:Attributes': [
          'record_key',
          'cancelled_batch',
          'cancel_reason',
          'cancelled_at',
          'cancelled_by',
        ],
      },
      StringEqualsIfExists: { 'dynamodb:Select': 'SPECIFIC_ATTRIBUTES', 'dynamodb:ReturnValues': 'NONE' },
    };
    expect(cancelStatements('JobRole')).toEqual([
      expect.objectContaining({
        Action: ['dynamodb:PutItem', 'dynamodb:GetItem'],
        Condition: {
          'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['cancelled batch *'] },
          ...attributes,
        },
      }),
    ]);
    expect(cancelStatements('ProducerRole')).toEqual([
      expect.objectContaining({
        Condition: {
          'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['cancelled batch nightly-*'] },
          ...attributes,
        },
      }),
    ]);
    const allowed = attributes['ForAllValues:StringEquals']['dynamodb:Attributes'];
    expect(allowed).not.toContain('status');
    expect(allowed).not.toContain('batch_id');
    expect(grantsOf(stack, 'ProducerRole').has('dynamodb:UpdateItem')).toBe(false);
  });

  it('lets `threadgate cancel` work within that grant: its PutItem writes and its GetItem reads only the granted attributes, returning none', async () => {
    // Prepare: a client that records each request and answers as a table holding the cancel would.
    const requests: Record<string, unknown>[] = [];
    const client = {
      send: async (command: { input: Record<string, unknown>; constructor: { name: string } }) => {
        requests.push({ command: command.constructor.name, ...command.input });
        if (command.constructor.name === 'PutItemCommand' && requests.length > 1) {
          throw Object.assign(new Error('exists'), { name: 'ConditionalCheckFailedException' });
        }
        return {
          Item: {
            record_key: { S: 'cancelled batch b' },
            cancelled_batch: { S: 'b' },
            cancelled_at: { S: 'now' },
          },
        };
      },
    } as unknown as DynamoDBClient;
    const cancels = new BatchCancels({ client, tableName: 'T' });
    // Act: a first cancel, then a second that reads the first back.
    await cancels.cancel('b', { reason: 'why', by: 'producer' });
    await cancels.cancel('b');
    // Assess
    const [put, , get] = requests as Array<{
      Item?: object;
      ProjectionExpression?: string;
      ReturnValues?: string;
    }>;
    expect(Object.keys(put?.Item ?? {}).every((a) => CANCEL_ITEM_ATTRIBUTES.includes(a))).toBe(true);
    expect(get?.ProjectionExpression?.split(', ').sort()).toEqual([...CANCEL_ITEM_ATTRIBUTES].sort());
    expect(requests.map((r) => r.ReturnValues)).toEqual([undefined, undefined, undefined]);
  });

  it('leaves cdk-nag nothing to report in a consumer stack with default props and a granted role', () => {
    const { app, gate, role } = consumer();
    gate.grantProduce(role);
    Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
    expect(() => app.synth()).not.toThrow();
  });

  it('names the package version in the stack description', () => {
    const stack = new ThreadgateStack(new App({ context: { 'aws:cdk:bundling-stacks': [] } }), 'Threadgate', {
      settings: { allowedHosts: HOSTS },
    });
    expect(Template.fromStack(stack).toJSON().Description).toMatch(
      new RegExp(`^threadgate ${VERSION.replace(/\./g, '\\.')}: `),
    );
  });
});
