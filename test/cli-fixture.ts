import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import {
  CloudFormationClient,
  CreateStackCommand,
  DescribeStacksCommand,
} from '@aws-sdk/client-cloudformation';
import { type MotoServer, startMoto } from '../local/moto.js';

/**
 * Test fixture for the CLI suites: a moto server holding a small threadgate-shaped stack made
 * from a raw CloudFormation template (queue + DLQ, outcomes table, pipeline-state parameter,
 * worker and adjuster functions, the queue → worker mapping), with the same output keys as
 * the CDK stack, and a helper that runs the real CLI process against it.
 */

export const STACK_NAME = 'ThreadgateCliTest';
export const SECRET_NAME = 'threadgate-test/captchaai-api-key';

const BIN = fileURLToPath(new URL('../bin/threadgate.js', import.meta.url));
const ROOT = fileURLToPath(new URL('..', import.meta.url));

export interface StackOptions {
  /** CAPTCHAAI_URL in the worker's environment. */
  captchaAiUrl?: string;
  reservedConcurrency?: number;
  maximumConcurrency?: number;
  reserve?: number;
  /** MaximumMessageSize of the jobs queue (SQS default 262144). */
  jobsMaximumMessageSize?: number;
}

export function stackTemplate(options: StackOptions = {}): string {
  const workerEnv: Record<string, unknown> = {
    TABLE_NAME: { Ref: 'Outcomes' },
    QUEUE_URL: { Ref: 'Jobs' },
    PIPELINE_STATE_PARAM: { Ref: 'PipelineState' },
    CAPTCHAAI_SECRET_NAME: SECRET_NAME,
    CAPTCHAAI_URL: options.captchaAiUrl ?? 'http://localhost:9/unused',
  };
  const template = {
    AWSTemplateFormatVersion: '2010-09-09',
    Resources: {
      Dlq: { Type: 'AWS::SQS::Queue', Properties: { MessageRetentionPeriod: 1209600 } },
      Jobs: {
        Type: 'AWS::SQS::Queue',
        Properties: {
          VisibilityTimeout: 900,
          ...(options.jobsMaximumMessageSize ? { MaximumMessageSize: options.jobsMaximumMessageSize } : {}),
          RedrivePolicy: { deadLetterTargetArn: { 'Fn::GetAtt': ['Dlq', 'Arn'] }, maxReceiveCount: 5 },
        },
      },
      Outcomes: {
        Type: 'AWS::DynamoDB::Table',
        Properties: {
          BillingMode: 'PAY_PER_REQUEST',
          AttributeDefinitions: [
            { AttributeName: 'record_key', AttributeType: 'S' },
            { AttributeName: 'batch_id', AttributeType: 'S' },
            { AttributeName: 'updated_at', AttributeType: 'S' },
          ],
          KeySchema: [{ AttributeName: 'record_key', KeyType: 'HASH' }],
          // The stack's batch index (infra/constructs/outcomes-table.ts).
          GlobalSecondaryIndexes: [
            {
              IndexName: 'batch_id-updated_at',
              KeySchema: [
                { AttributeName: 'batch_id', KeyType: 'HASH' },
                { AttributeName: 'updated_at', KeyType: 'RANGE' },
              ],
              Projection: { ProjectionType: 'ALL' },
            },
          ],
        },
      },
      PipelineState: {
        Type: 'AWS::SSM::Parameter',
        Properties: { Name: '/threadgate-test/pipeline-state', Type: 'String', Value: '{"paused":false}' },
      },
      Role: {
        Type: 'AWS::IAM::Role',
        Properties: {
          AssumeRolePolicyDocument: {
            Version: '2012-10-17',
            Statement: [
              { Effect: 'Allow', Principal: { Service: 'lambda.amazonaws.com' }, Action: 'sts:AssumeRole' },
            ],
          },
        },
      },
      Worker: {
        Type: 'AWS::Lambda::Function',
        Properties: {
          Runtime: 'nodejs20.x',
          Handler: 'index.handler',
          Role: { 'Fn::GetAtt': ['Role', 'Arn'] },
          Code: { ZipFile: 'exports.handler = async () => ({ batchItemFailures: [] });' },
          Timeout: 150,
          ReservedConcurrentExecutions: options.reservedConcurrency ?? 8,
          Environment: { Variables: workerEnv },
        },
      },
      Adjuster: {
        Type: 'AWS::Lambda::Function',
        Properties: {
          Runtime: 'nodejs20.x',
          Handler: 'index.handler',
          Role: { 'Fn::GetAtt': ['Role', 'Arn'] },
          Code: { ZipFile: 'exports.handler = async () => ({});' },
          Environment: {
            Variables: { RESERVE: String(options.reserve ?? 2), MIN_CAP: '1', MAX_CAP: '1000' },
          },
        },
      },
      Mapping: {
        Type: 'AWS::Lambda::EventSourceMapping',
        Properties: {
          EventSourceArn: { 'Fn::GetAtt': ['Jobs', 'Arn'] },
          FunctionName: { Ref: 'Worker' },
          BatchSize: 1,
          Enabled: true,
          ScalingConfig: { MaximumConcurrency: options.maximumConcurrency ?? 8 },
        },
      },
    },
    Outputs: {
      QueueUrl: { Value: { Ref: 'Jobs' } },
      QueueArn: { Value: { 'Fn::GetAtt': ['Jobs', 'Arn'] } },
      DlqUrl: { Value: { Ref: 'Dlq' } },
      TableName: { Value: { Ref: 'Outcomes' } },
      WorkerFunctionName: { Value: { Ref: 'Worker' } },
      AdjusterFunctionName: { Value: { Ref: 'Adjuster' } },
      MappingUuid: { Value: { Ref: 'Mapping' } },
      PipelineStateParameter: { Value: { Ref: 'PipelineState' } },
      AdjusterRuleName: { Value: 'threadgate-test-adjuster-rule' },
      SecretName: { Value: SECRET_NAME },
    },
  };
  return JSON.stringify(template);
}

export interface CliStack {
  moto: MotoServer;
  outputs: Record<string, string>;
  /** AWS SDK client configuration for the test's own clients. */
  clientConfig: {
    endpoint: string;
    region: string;
    credentials: { accessKeyId: string; secretAccessKey: string };
  };
  stop(): Promise<void>;
}

export async function createStack(
  moto: MotoServer,
  options: StackOptions = {},
): Promise<Record<string, string>> {
  const cfn = new CloudFormationClient({ ...clientConfigFor(moto), maxAttempts: 1 });
  await cfn.send(new CreateStackCommand({ StackName: STACK_NAME, TemplateBody: stackTemplate(options) }));
  for (let i = 0; i < 100; i++) {
    const out = await cfn.send(new DescribeStacksCommand({ StackName: STACK_NAME }));
    const stack = out.Stacks?.[0];
    if (stack?.StackStatus === 'CREATE_COMPLETE') {
      return Object.fromEntries((stack.Outputs ?? []).map((o) => [o.OutputKey ?? '', o.OutputValue ?? '']));
    }
    if (stack?.StackStatus?.endsWith('FAILED')) {
      throw new Error(`test stack failed: ${stack.StackStatus} ${stack.StackStatusReason ?? ''}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error('test stack did not complete');
}

export function clientConfigFor(moto: MotoServer): CliStack['clientConfig'] {
  return {
    endpoint: moto.endpoint,
    region: 'us-east-1',
    credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' },
  };
}

export async function startCliStack(options: StackOptions = {}): Promise<CliStack> {
  const moto = await startMoto();
  try {
    const outputs = await createStack(moto, options);
    return { moto, outputs, clientConfig: clientConfigFor(moto), stop: () => moto.stop() };
  } catch (err) {
    await moto.stop();
    throw err;
  }
}

export interface CliRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Environment for the CLI process: the test's moto, and nothing AWS-related from the caller's shell. */
export function cliEnv(moto: MotoServer | undefined, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (name.startsWith('AWS_') || name.startsWith('THREADGATE_') || name === 'CAPTCHAAI_URL') continue;
    env[name] = value;
  }
  return { ...env, ...(moto ? moto.awsEnv : {}), THREADGATE_STACK: STACK_NAME, NO_COLOR: '1', ...extra };
}

/** Every CLI run of this test file, so a suite can check that no output ever carried a secret. */
export const cliRuns: CliRun[] = [];

/** Runs `node bin/threadgate.js ARGS` to completion; stdin is written and closed. */
export function runCli(
  args: string[],
  options: {
    env: NodeJS.ProcessEnv;
    stdin?: string;
    timeoutMs?: number;
    /** Sees stderr as it grows, e.g. to send the process a signal at some point. */
    onStderr?: (stderrSoFar: string, child: ChildProcess) => void;
  },
): Promise<CliRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], {
      cwd: ROOT,
      env: options.env,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk;
    });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      stderr += chunk;
      options.onStderr?.(stderr, child);
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`threadgate ${args.join(' ')} timed out\nstdout: ${stdout}\nstderr: ${stderr}`));
    }, options.timeoutMs ?? 50_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      const run = { code, stdout, stderr };
      cliRuns.push(run);
      resolve(run);
    });
    child.stdin.end(options.stdin ?? '');
  });
}

/**
 * Runs `node bin/threadgate.js ARGS | READER` in bash, as an operator would type it; `code` is
 * threadgate's own exit code (PIPESTATUS), `stdout` what the reader printed.
 */
export async function runCliPiped(args: string[], reader: string, env: NodeJS.ProcessEnv): Promise<CliRun> {
  const quoted = [process.execPath, BIN, ...args].map((a) => `'${a.replaceAll("'", `'\\''`)}'`).join(' ');
  return await new Promise((resolve, reject) => {
    const child = spawn('bash', ['-c', `${quoted} | ${reader}; exit "\${PIPESTATUS[0]}"`], {
      cwd: ROOT,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (c: string) => {
      stdout += c;
    });
    child.stderr.setEncoding('utf8').on('data', (c: string) => {
      stderr += c;
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}
