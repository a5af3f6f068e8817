import { readFileSync } from 'node:fs';
import { App, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as iam from 'aws-cdk-lib/aws-iam';
import { describe, expect, it } from 'vitest';
import { iamAction } from '../../../cli/aws-actions.js';
import { PACKAGE_ROOT } from '../../../infra/package-root.js';
import { Threadgate } from '../../../infra/threadgate.js';

/**
 * A role with `grantOperate` alone can run every command README lists for operators. Each
 * command's AWS calls (IAM actions) are listed below with the source files that make them, and
 * checked two ways: each action against the synthesized policy of a role granted nothing else,
 * and the sources against the list (every SDK call in a command's files is listed for it, or
 * named in NOT_CALLED with the reason), so a call added to a command without its grant fails here.
 */
/** pause and resume: the recorded state (the state item) and the mapping they switch. */
const SWITCH = [
  'cloudformation:DescribeStacks',
  'dynamodb:GetItem',
  'dynamodb:UpdateItem',
  'lambda:GetEventSourceMapping',
  'lambda:UpdateEventSourceMapping',
];

const CALLS: Record<string, { files: string[]; actions: string[] }> = {
  status: {
    // and through SHARED: the outputs, the worker's environment and the key (threadsinfo), the state and the mapping, the cap
    files: ['cli/commands/status.ts'],
    actions: [
      'cloudformation:DescribeStacks',
      'sqs:GetQueueAttributes',
      'lambda:GetFunctionConfiguration',
      'lambda:GetFunctionConcurrency',
      'lambda:GetEventSourceMapping',
      'dynamodb:GetItem',
      'dynamodb:Scan',
      'secretsmanager:GetSecretValue',
    ],
  },
  enqueue: {
    files: ['cli/commands/enqueue.ts'],
    actions: ['cloudformation:DescribeStacks', 'sqs:SendMessage'],
  },
  wait: {
    files: ['cli/commands/wait.ts'],
    actions: [
      'cloudformation:DescribeStacks',
      'dynamodb:Query',
      'dynamodb:BatchGetItem',
      'dynamodb:GetItem',
      'sqs:GetQueueAttributes',
      'sqs:ReceiveMessage',
    ],
  },
  outcomes: {
    files: ['cli/commands/outcomes.ts'],
    actions: ['cloudformation:DescribeStacks', 'dynamodb:Scan', 'dynamodb:Query', 'dynamodb:BatchGetItem'],
  },
  pause: {
    files: ['cli/commands/pause.ts'],
    actions: SWITCH,
  },
  resume: {
    files: ['cli/commands/resume.ts'],
    // and threadsinfo with the stored key first, at the worker's CAPTCHAAI_URL
    actions: [...SWITCH, 'lambda:GetFunctionConfiguration', 'secretsmanager:GetSecretValue'],
  },
  cancel: {
    files: ['cli/commands/cancel.ts'],
    actions: [
      'cloudformation:DescribeStacks',
      'lambda:GetFunctionConfiguration',
      'dynamodb:PutItem',
      'dynamodb:GetItem',
    ],
  },
  redrive: {
    files: ['cli/commands/redrive.ts'],
    actions: [
      'cloudformation:DescribeStacks',
      'sqs:GetQueueAttributes',
      'sqs:ReceiveMessage',
      'sqs:DeleteMessage',
      'sqs:ChangeMessageVisibility',
      'sqs:SendMessage',
      'sqs:StartMessageMoveTask',
      'sqs:ListMessageMoveTasks',
      'sqs:CancelMessageMoveTask',
    ],
  },
  secret: {
    files: ['cli/commands/secret.ts'],
    actions: [
      'cloudformation:DescribeStacks',
      'secretsmanager:CreateSecret',
      'secretsmanager:PutSecretValue',
    ],
  },
};

/** The modules the commands share: each call in them is made by some command above, or is in NOT_CALLED. */
const SHARED = [
  'cli/stack.ts',
  'cli/dlq-read.ts',
  'functions/pipeline/control.ts',
  'functions/pipeline/cap-policy.ts',
  'functions/pipeline/secret.ts',
  'functions/pipeline/state-item.ts',
  'functions/records/cancellations.ts',
  'functions/records/store.ts',
];

/** Calls in those files that no operator command makes, each with why. */
const NOT_CALLED: Record<string, string> = {
  'lambda:ListEventSourceMappings': 'control.ts: the CLI passes the mapping UUID from the stack outputs',
  'dynamodb:UpdateItem': "store.ts: the worker's writes; the CLI only reads rows through it",
};

/** The SDK client each package's commands go through (for cli/aws-actions.ts iamAction). */
const CLIENT_OF: Record<string, string> = {
  '@aws-sdk/client-cloudformation': 'CloudFormationClient',
  '@aws-sdk/client-dynamodb': 'DynamoDBClient',
  '@aws-sdk/lib-dynamodb': 'DynamoDBClient',
  '@aws-sdk/client-lambda': 'LambdaClient',
  '@aws-sdk/client-secrets-manager': 'SecretsManagerClient',
  '@aws-sdk/client-sqs': 'SQSClient',
};
/** lib-dynamodb's document commands and the DynamoDB operations they send. */
const DOCUMENT_OPERATION: Record<string, string> = { Get: 'GetItem', Put: 'PutItem', Update: 'UpdateItem' };

/** The IAM actions of the SDK calls in `file`: `new XCommand(` and `paginateX(`, imported statically or dynamically. */
function actionsIn(file: string): string[] {
  const source = readFileSync(`${PACKAGE_ROOT}${file}`, 'utf8');
  const packageOf = new Map<string, string>();
  for (const m of source.matchAll(
    /(?:import|const)\s*\{([^}]*)\}\s*(?:from|=\s*await import\()\s*'(@aws-sdk\/[^']+)'/g,
  )) {
    for (const name of (m[1] ?? '').split(','))
      packageOf.set(name.replace(/^\s*type\s+/, '').trim(), m[2] ?? '');
  }
  const out: string[] = [];
  for (const m of source.matchAll(/new (\w+)Command\(|\b(paginate\w+)\(/g)) {
    const name = m[1] ? `${m[1]}Command` : (m[2] ?? '');
    const pkg = packageOf.get(name);
    if (!pkg) continue; // not an AWS SDK call
    let operation = m[1] ?? name.replace(/^paginate/, '');
    if (pkg === '@aws-sdk/lib-dynamodb') operation = DOCUMENT_OPERATION[operation] ?? operation;
    out.push(iamAction(CLIENT_OF[pkg] ?? pkg, operation));
  }
  return out;
}

/** The commands README names for operators ("threadgate status … # also enqueue, wait, …"). */
function readmeOperatorCommands(): string[] {
  const readme = readFileSync(`${PACKAGE_ROOT}README.md`, 'utf8');
  const line = readme.split('\n').find((l) => /^threadgate status .*# also /.test(l));
  expect(line, "README's operator line").toBeDefined();
  const also = (line ?? '').replace(/^.*# also /, '').split(',');
  return ['status', ...also.map((c) => c.trim())];
}

/** Every action the policies attached to the role allow. */
function allowedActions(): Set<string> {
  const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
  const stack = new Stack(app, 'Ops');
  const gate = new Threadgate(stack, 'Gate', { allowedHosts: ['forms.example.com'] });
  const role = new iam.Role(stack, 'OpsRole', { assumedBy: new iam.AccountRootPrincipal() });
  gate.grantOperate(role);
  const roleId = stack.getLogicalId(role.node.defaultChild as iam.CfnRole);
  const allowed = new Set<string>();
  const policies = Template.fromStack(stack).findResources('AWS::IAM::Policy');
  for (const policy of Object.values(policies)) {
    const roles = JSON.stringify(policy.Properties.Roles);
    if (!roles.includes(`"${roleId}"`)) continue;
    for (const s of policy.Properties.PolicyDocument.Statement as {
      Effect: string;
      Action: string | string[];
    }[]) {
      if (s.Effect !== 'Allow') continue;
      for (const a of [s.Action].flat()) allowed.add(a);
    }
  }
  return allowed;
}

describe('grantOperate covers every operator command README lists', () => {
  const allowed = allowedActions();

  it('lists the same commands as README', () => {
    expect(Object.keys(CALLS).sort()).toEqual(readmeOperatorCommands().sort());
  });

  it.each(Object.entries(CALLS))('%s: every AWS call it makes is allowed', (_command, { actions }) => {
    const missing = actions.filter((a) => !allowed.has(a) && !allowed.has(`${a.split(':')[0]}:*`));
    expect(missing).toEqual([]);
  });

  it.each(Object.entries(CALLS))(
    '%s: every AWS call in its sources is listed above',
    (_command, { files, actions }) => {
      const unlisted = files.flatMap(actionsIn).filter((a) => !actions.includes(a) && !(a in NOT_CALLED));
      expect(unlisted).toEqual([]);
    },
  );

  it.each(SHARED)('%s: every AWS call in it is made by a command listed above', (file) => {
    const listed = new Set(Object.values(CALLS).flatMap((c) => c.actions));
    const unlisted = actionsIn(file).filter((a) => !listed.has(a) && !(a in NOT_CALLED));
    expect(unlisted).toEqual([]);
  });
});
