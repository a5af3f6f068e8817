import {
  CloudFormationClient,
  type CloudFormationClientConfig,
  DescribeStacksCommand,
  paginateDescribeStacks,
  type Stack,
} from '@aws-sdk/client-cloudformation';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { GetFunctionConfigurationCommand, LambdaClient } from '@aws-sdk/client-lambda';
import { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import {
  SendMessageBatchCommand,
  type SendMessageBatchRequestEntry,
  SendMessageCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import type { Command } from 'commander';
import { RotatingCaptchaAiClient } from '../functions/captchaai/rotating-client.js';
import { DEFAULTS } from '../functions/common/settings.js';
import { PipelineControl } from '../functions/pipeline/control.js';
import { readLaneSettings } from '../functions/pipeline/lanes.js';
import { ApiKeySource } from '../functions/pipeline/secret.js';
import type { StackOutputKey } from '../infra/outputs.js';
import { isAccessDenied, noteActions, refusedAction } from './aws-actions.js';
import { CliError, EXIT } from './exit-codes.js';

/**
 * How the CLI finds a deployed threadgate: the CloudFormation outputs of one stack (named by
 * `--stack`, THREADGATE_STACK, or `Threadgate`), read through AWS SDK clients that resolve the
 * endpoint, region and credentials the SDK's usual way (AWS, LocalStack and the moto-based
 * local stack alike). AWS failures become CliErrors that say what to do next.
 */

/** The stack outputs, exactly as the CDK stack names them. */
export type OutputKey = StackOutputKey;

/** Options every stack-backed command takes. */
export interface StackOptions {
  stack?: string;
  region?: string;
  endpointUrl?: string;
}

export function addStackOptions(command: Command): Command {
  return command
    .option(
      '--stack <name>',
      `the deployed stack to use (default: $THREADGATE_STACK or ${DEFAULTS.stackName})`,
    )
    .option('--region <region>', 'AWS region (default: $AWS_REGION, then $AWS_DEFAULT_REGION)')
    .option(
      '--endpoint-url <url>',
      "AWS endpoint, for LocalStack or the local stack (default: $AWS_ENDPOINT_URL, or the profile's endpoint_url)",
    );
}

export interface AwsClients {
  cloudFormation: CloudFormationClient;
  sqs: SQSClient;
  lambda: LambdaClient;
  dynamodb: DynamoDBClient;
  documents: DynamoDBDocumentClient;
  secrets: SecretsManagerClient;
}

export interface AwsContext {
  region: string;
  /** The custom endpoint, when one is configured (undefined = AWS itself). */
  endpoint: string | undefined;
  /** Where the endpoint came from, for error messages. */
  endpointSource: string | undefined;
  clients: AwsClients;
}

/**
 * Builds SDK clients once per command run. The endpoint is `--endpoint-url` when given, else
 * the SDK's own resolution: AWS_ENDPOINT_URL_<SERVICE>, AWS_ENDPOINT_URL, then the profile's
 * `endpoint_url` (or its `services` section) in the shared config file; `--profile` selects
 * the profile (through AWS_PROFILE, see cli/main.ts). `credentials` is for callers in code
 * (tests against the emulator); the CLI itself uses the SDK's credential chain.
 */
export async function awsContext(
  options: StackOptions & { credentials?: CloudFormationClientConfig['credentials'] } = {},
  env: NodeJS.ProcessEnv = process.env,
): Promise<AwsContext> {
  const region = options.region ?? env.AWS_REGION ?? env.AWS_DEFAULT_REGION ?? (await profileRegion());
  if (!region) {
    throw new CliError(
      'no AWS region: set AWS_REGION (or AWS_DEFAULT_REGION), or pass --region, e.g. --region us-east-1',
      EXIT.usage,
    );
  }
  const config = {
    region,
    ...(options.endpointUrl ? { endpoint: options.endpointUrl } : {}),
    ...(options.credentials ? { credentials: options.credentials } : {}),
    maxAttempts: 3,
    requestHandler: { connectionTimeout: 5_000, requestTimeout: 60_000 },
  };
  // Each client notes the IAM action of a failed call, for the message of an AccessDenied.
  const cloudFormation = noteActions(new CloudFormationClient(config));
  const dynamodb = noteActions(new DynamoDBClient(config));
  const endpoint = options.endpointUrl ?? (await configuredEndpoint(cloudFormation));
  return {
    region,
    endpoint,
    endpointSource: options.endpointUrl ? '--endpoint-url' : endpoint ? endpointOrigin(endpoint) : undefined,
    clients: {
      cloudFormation,
      // Without this the SQS client sends each call to the host in its QueueUrl, which for
      // queues CloudFormation created may be AWS itself rather than the configured endpoint.
      sqs: noteActions(new SQSClient({ ...config, useQueueUrlAsEndpoint: false })),
      lambda: noteActions(new LambdaClient(config)),
      dynamodb,
      documents: DynamoDBDocumentClient.from(dynamodb),
      secrets: noteActions(new SecretsManagerClient(config)),
    },
  };
}

/**
 * The endpoint the SDK resolved from the environment or the shared config file, to name it in
 * error messages. `serviceConfiguredEndpoint` is the SDK's own (internal) resolver; if a later
 * SDK drops it, messages say "in AWS region …" instead, and requests are unaffected.
 */
async function configuredEndpoint(client: CloudFormationClient): Promise<string | undefined> {
  const resolve = (client.config as { serviceConfiguredEndpoint?: () => Promise<string | undefined> })
    .serviceConfiguredEndpoint;
  try {
    return (await resolve?.()) ?? undefined;
  } catch {
    return undefined;
  }
}

/** Which setting an SDK-resolved endpoint most likely came from (for messages only). */
function endpointOrigin(endpoint: string, env: NodeJS.ProcessEnv = process.env): string {
  if (env.AWS_ENDPOINT_URL_CLOUDFORMATION === endpoint) return 'AWS_ENDPOINT_URL_CLOUDFORMATION';
  if (env.AWS_ENDPOINT_URL === endpoint) return 'AWS_ENDPOINT_URL';
  return `endpoint_url of AWS profile "${env.AWS_PROFILE ?? 'default'}"`;
}

/** The region of the active profile (~/.aws/config), as the SDK would find it; undefined if none. */
async function profileRegion(): Promise<string | undefined> {
  try {
    return await new CloudFormationClient({}).config.region();
  } catch {
    return undefined;
  }
}

export interface ThreadgateStack {
  name: string;
  status: string;
  outputs: Partial<Record<OutputKey, string>> & Record<string, string>;
}

export function stackName(options: StackOptions, env: NodeJS.ProcessEnv = process.env): string {
  return options.stack ?? env.THREADGATE_STACK ?? DEFAULTS.stackName;
}

function where(aws: AwsContext): string {
  return aws.endpoint ? `at ${aws.endpoint} (${aws.endpointSource})` : `in AWS region ${aws.region}`;
}

/** Reads the stack's outputs; a missing stack is an error that says how to deploy or which name to pass. */
export async function findStack(aws: AwsContext, name: string): Promise<ThreadgateStack> {
  let stack: Stack | undefined;
  try {
    const out = await aws.clients.cloudFormation.send(new DescribeStacksCommand({ StackName: name }));
    stack = out.Stacks?.[0];
  } catch (err) {
    if (!isStackMissing(err)) throw explainAwsError(err, aws);
  }
  if (!stack) {
    const others = await threadgateStacksHere(aws).catch(() => []);
    const hint = others.length
      ? ` Threadgate stacks found there: ${others.join(', ')} — pass one with --stack NAME or set THREADGATE_STACK.`
      : ' Deploy it with `npx cdk deploy` (AWS) or start the local stack with `npm run local`, or pass the deployed name with --stack NAME (or THREADGATE_STACK).';
    throw new CliError(`no stack named "${name}" ${where(aws)}.${hint}`, EXIT.failure);
  }
  const outputs: Record<string, string> = {};
  for (const o of stack.Outputs ?? []) {
    if (o.OutputKey && o.OutputValue !== undefined) outputs[o.OutputKey] = o.OutputValue;
  }
  return { name, status: stack.StackStatus ?? 'UNKNOWN', outputs };
}

/** The value of one output, or an error naming the output and the stack. */
export function output(stack: ThreadgateStack, key: OutputKey): string {
  const value = stack.outputs[key];
  if (!value) {
    throw new CliError(
      `stack "${stack.name}" (${stack.status}) has no output ${key}; is it a threadgate stack, and did its deploy finish? ` +
        'Redeploy it, or pass the right one with --stack NAME.',
      EXIT.failure,
    );
  }
  return value;
}

async function threadgateStacksHere(aws: AwsContext): Promise<string[]> {
  const names: string[] = [];
  for await (const page of paginateDescribeStacks({ client: aws.clients.cloudFormation }, {})) {
    for (const s of page.Stacks ?? []) {
      const keys = new Set((s.Outputs ?? []).map((o) => o.OutputKey));
      if (keys.has('QueueUrl') && keys.has('LedgerTableName') && s.StackName) names.push(s.StackName);
    }
    if (names.length >= 20) break;
  }
  return names;
}

function isStackMissing(err: unknown): boolean {
  const e = err as { name?: string; message?: string };
  return (
    (e.name === 'ValidationError' || e.name === 'ValidationException') &&
    /does not exist/i.test(e.message ?? '')
  );
}

const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ETIMEDOUT',
]);

/**
 * Turns an AWS SDK failure into an operator-facing CliError (no credentials, endpoint
 * unreachable, credentials rejected, endpoint not speaking AWS). Anything else keeps the
 * service's own message, prefixed with the error name.
 */
export function explainAwsError(err: unknown, aws: AwsContext): CliError {
  if (err instanceof CliError) return err;
  const e = err as {
    name?: string;
    code?: string;
    message?: string;
    $metadata?: { httpStatusCode?: number };
    cause?: { code?: string };
  };
  const name = e.name ?? 'Error';
  const message = e.message ?? String(err);
  const code = e.code ?? e.cause?.code;
  if (name === 'CredentialsProviderError' || /Could not load credentials/i.test(message)) {
    return new CliError(
      'no AWS credentials found: set AWS_PROFILE (and run `aws sso login` if it uses SSO) or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. ' +
        'For LocalStack or the local stack any non-empty values work, e.g. AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing.',
      EXIT.failure,
      { cause: err },
    );
  }
  if ((code && NETWORK_CODES.has(code)) || name === 'TimeoutError' || /socket hang up/i.test(message)) {
    const target = aws.endpoint
      ? `the AWS endpoint ${aws.endpoint} (from ${aws.endpointSource})`
      : `AWS in region ${aws.region}`;
    const next = aws.endpoint
      ? `Is the emulator running (start the local stack with \`npm run local\`), and is the port right? Unset ${aws.endpointSource} to use AWS itself.`
      : 'Check the network, proxy settings and the region.';
    return new CliError(`cannot reach ${target}: ${code ?? name}. ${next}`, EXIT.transient, { cause: err });
  }
  if (
    [
      'ExpiredToken',
      'ExpiredTokenException',
      'InvalidClientTokenId',
      'UnrecognizedClientException',
      'SignatureDoesNotMatch',
      'InvalidSignatureException',
    ].includes(name)
  ) {
    return new CliError(
      `AWS rejected the credentials (${name}): refresh them (e.g. \`aws sso login\`) or check AWS_PROFILE / AWS_ACCESS_KEY_ID.`,
      EXIT.failure,
      { cause: err },
    );
  }
  if (isAccessDenied(name)) {
    const action = refusedAction(err);
    return new CliError(
      `AWS refused ${action ?? 'the request'} (${name}: ${message}); the CLI's identity needs ${
        action ? 'that action' : 'access'
      } on the stack's resources: the construct's grantOperate(role) covers every operator command (docs/security.md#least-privilege).`,
      EXIT.failure,
      { cause: err },
    );
  }
  if (/Deserialization error|XML parse error|is not valid JSON/i.test(message)) {
    return new CliError(
      `${aws.endpoint ?? 'the AWS endpoint'} answered something that is not an AWS response (HTTP ${
        e.$metadata?.httpStatusCode ?? '?'
      }); is ${aws.endpointSource ?? 'the endpoint'} pointing at the emulator, and does it support this operation?`,
      EXIT.failure,
      { cause: err },
    );
  }
  return new CliError(`${name}: ${message}`, EXIT.failure, { cause: err });
}

/**
 * Runs a stack-backed command body: builds the clients, finds the stack, and turns any AWS
 * failure into an error that says what to do next.
 */
export async function withStack<T>(
  options: StackOptions,
  body: (aws: AwsContext, stack: ThreadgateStack) => Promise<T>,
): Promise<T> {
  const aws = await awsContext(options);
  try {
    const stack = await findStack(aws, stackName(options));
    return await body(aws, stack);
  } catch (err) {
    throw explainAwsError(err, aws);
  }
}

/**
 * PipelineControl bound to the stack's worker, queue and state item. With the worker's
 * environment ({@link workerEnvironment}) and LANES above 1 in it, the control reads the lane
 * shape too (`threadgate status`); the other commands read and write the state alone.
 */
export function pipelineControl(
  aws: AwsContext,
  stack: ThreadgateStack,
  workerEnv: Record<string, string> = {},
): PipelineControl {
  const { firstShape } = readLaneSettings(workerEnv);
  return new PipelineControl({
    lambda: aws.clients.lambda,
    dynamodb: aws.clients.dynamodb,
    ledgerTable: output(stack, 'LedgerTableName'),
    workerFunctionName: output(stack, 'WorkerFunctionName'),
    queueArn: output(stack, 'QueueArn'),
    // From the outputs, so operators need no ListEventSourceMappings (a `*` permission).
    mappingUuid: stack.outputs.MappingUuid,
    ...(firstShape ? { firstShape } : {}),
  });
}

/** The worker's environment variables, or {} when they cannot be read. */
export async function workerEnvironment(
  aws: AwsContext,
  stack: ThreadgateStack,
): Promise<Record<string, string>> {
  const name = stack.outputs.WorkerFunctionName;
  if (!name) return {};
  const out = await aws.clients.lambda.send(new GetFunctionConfigurationCommand({ FunctionName: name }));
  return out.Environment?.Variables ?? {};
}

export interface CaptchaAiAccess {
  /** CAPTCHAAI_URL from the CLI's environment, else the worker's, else CaptchaAI itself. */
  baseUrl: string;
  secretName: string;
  /** Builds the client; reads the key from Secrets Manager (never printed). */
  client(): Promise<RotatingCaptchaAiClient>;
}

/** How the CLI talks to CaptchaAI for this stack: the worker's URL and the stack's API-key secret. */
export async function captchaAiAccess(
  aws: AwsContext,
  stack: ThreadgateStack,
  env: NodeJS.ProcessEnv = process.env,
): Promise<CaptchaAiAccess> {
  const workerEnv = await workerEnvironment(aws, stack).catch(() => ({}) as Record<string, string>);
  const baseUrl = env.CAPTCHAAI_URL ?? workerEnv.CAPTCHAAI_URL ?? DEFAULTS.captchaaiUrl;
  const secretName = stack.outputs.SecretName ?? workerEnv.CAPTCHAAI_SECRET_NAME ?? DEFAULTS.secretName;
  return {
    baseUrl,
    secretName,
    async client() {
      const keys = new ApiKeySource({ client: aws.clients.secrets, secretName });
      try {
        // Read now, so a missing secret is explained here rather than inside a CaptchaAI call.
        await keys.get();
      } catch (err) {
        if ((err as { name?: string }).name === 'ResourceNotFoundException') {
          throw new CliError(
            `the API-key secret "${secretName}" does not exist ${where(aws)}; store the key with \`threadgate secret set\` (it reads the key from standard input).`,
            EXIT.failure,
            { cause: err },
          );
        }
        throw explainAwsError(err, aws);
      }
      return new RotatingCaptchaAiClient(keys, { baseUrl, timings: { httpTimeoutMs: 15_000 } });
    },
  };
}

export interface BatchSendFailure {
  /** The entry's Id. */
  id: string;
  code: string;
  message: string;
}

/** Errors with which SQS refuses what was sent (size, characters, attributes), not the call. */
const REFUSED_ENTRY_ERRORS = new Set([
  'InvalidParameterValue',
  'InvalidParameterValueException',
  'InvalidMessageContents',
  'BatchRequestTooLong',
  'AWS.SimpleQueueService.BatchRequestTooLong',
  'InvalidAttributeValue',
]);

/**
 * SendMessageBatch (up to 10 entries) that retries only what may succeed later: entries SQS
 * failed on its side, and whole calls that failed for transient reasons. When SQS refuses the
 * whole batch because of one bad entry (some endpoints do that instead of failing the entry),
 * the entries are sent one by one so the good ones still go and only the bad one fails.
 * Returns the ids sent and the ids that failed for good; throws only when the queue cannot
 * be reached at all after the retries.
 */
export async function sendMessageBatchWithRetries(
  aws: AwsContext,
  queueUrl: string,
  entries: SendMessageBatchRequestEntry[],
  o: { attempts?: number; sleep?: (ms: number) => Promise<void> } = {},
): Promise<{ sent: string[]; failed: BatchSendFailure[] }> {
  const attempts = o.attempts ?? 6;
  const sleep = o.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
  const sent: string[] = [];
  const failed: BatchSendFailure[] = [];
  let pending = entries;
  for (let attempt = 1; pending.length > 0; attempt++) {
    if (attempt > attempts) {
      for (const e of pending)
        failed.push({
          id: e.Id ?? '',
          code: 'RetriesExhausted',
          message: `not sent after ${attempts} attempts`,
        });
      break;
    }
    if (attempt > 1) await sleep(Math.min(5_000, 200 * 2 ** (attempt - 2)));
    try {
      const out = await aws.clients.sqs.send(
        new SendMessageBatchCommand({ QueueUrl: queueUrl, Entries: pending }),
      );
      for (const ok of out.Successful ?? []) if (ok.Id) sent.push(ok.Id);
      const retry = new Set<string>();
      for (const f of out.Failed ?? []) {
        if (f.SenderFault)
          failed.push({ id: f.Id ?? '', code: f.Code ?? 'Unknown', message: f.Message ?? '' });
        else if (f.Id) retry.add(f.Id);
      }
      pending = pending.filter((e) => e.Id && retry.has(e.Id));
    } catch (err) {
      const name = (err as { name?: string }).name ?? '';
      if (!REFUSED_ENTRY_ERRORS.has(name)) {
        // The SDK already retried throttling and network errors; a few more rounds ride out a blip.
        if (attempt >= attempts) throw err;
        continue;
      }
      const retry: SendMessageBatchRequestEntry[] = [];
      for (const e of pending) {
        try {
          await aws.clients.sqs.send(
            new SendMessageCommand({
              QueueUrl: queueUrl,
              MessageBody: e.MessageBody,
              MessageAttributes: e.MessageAttributes,
            }),
          );
          sent.push(e.Id ?? '');
        } catch (one) {
          const oneName = (one as { name?: string }).name ?? 'Error';
          if (REFUSED_ENTRY_ERRORS.has(oneName)) {
            failed.push({ id: e.Id ?? '', code: oneName, message: (one as Error).message ?? '' });
          } else retry.push(e);
        }
      }
      pending = retry;
    }
  }
  return { sent, failed };
}
