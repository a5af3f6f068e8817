import { randomUUID } from 'node:crypto';
import {
  createWriteStream,
  existsSync,
  mkdirSync,
  renameSync,
  rmSync,
  type WriteStream,
  writeFileSync,
} from 'node:fs';
import { dirname, join, normalize } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Worker } from 'node:worker_threads';
import {
  EventBridgeClient,
  ListRulesCommand,
  ListTargetsByRuleCommand,
  type Rule,
  type Target,
} from '@aws-sdk/client-eventbridge';
import {
  type EventSourceMappingConfiguration,
  type FunctionConfiguration,
  GetEventSourceMappingCommand,
  GetFunctionCommand,
  GetFunctionConcurrencyCommand,
  LambdaClient,
  ListEventSourceMappingsCommand,
} from '@aws-sdk/client-lambda';
import { GetObjectCommand, ListBucketsCommand, S3Client } from '@aws-sdk/client-s3';
import {
  ChangeMessageVisibilityBatchCommand,
  DeleteMessageBatchCommand,
  GetQueueUrlCommand,
  type Message,
  ReceiveMessageCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { readZip } from './zip.js';

/**
 * threadgate's local Lambda runtime for moto, which stores functions, mappings and rules but
 * runs none of them. It reads the deployed configuration back from the emulator and behaves
 * like Lambda's SQS poller and EventBridge's scheduler:
 *
 * - each SQS event source mapping is polled with concurrency = min(reserved concurrency,
 *   ScalingConfig.MaximumConcurrency), re-read every `refreshMs`, so the cap adjuster's
 *   changes take effect and a disabled mapping stops polling (invocations already running
 *   finish);
 * - each invocation runs the bundle CDK built (downloaded from the emulator's S3, where
 *   `cdk deploy` put it) in a worker thread with the function's environment, Lambda's SQS
 *   event and context shapes, the function timeout (the thread is terminated) and partial
 *   batch responses (only the successful messages are deleted); redelivery is left to the
 *   queue's visibility timeout and redrive policy;
 * - scheduled rules (`rate(...)`) fire their Lambda targets at rate × `timeScale`.
 *
 * Function output goes to `<logDir>/<function>.log`, never to the console.
 */
export interface LocalRuntimeOptions {
  /** AWS_ENDPOINT_URL, AWS_REGION and credentials of the emulator (see local/moto.ts awsEnvFor). */
  awsEnv: Record<string, string>;
  /** Directory for `<function>.log` and `runtime.log`. */
  logDir: string;
  /** Multiplies scheduled rules' rates (0.01 runs a one-minute rule every 0.6 s). @default 1 */
  timeScale?: number;
  /** How often mappings, concurrency and rules are re-read, in ms. @default 500 */
  refreshMs?: number;
  /** Run only these functions (default: every function with an SQS mapping or a scheduled rule). */
  functionNames?: string[];
  /** Unzipped code per CodeSha256 is cached here. @default <logDir>/code */
  codeCacheDir?: string;
  /** Use this directory as a function's code instead of fetching its zip (keyed by function name). */
  codeDirs?: Record<string, string>;
  /** Strings replaced by `***` in function logs (e.g. the API key), as a second line of defence. */
  redact?: string[];
  /** Concurrency of a mapping whose function has neither reserved concurrency nor a mapping maximum. @default 10 */
  unreservedLimit?: number;
  /**
   * Long-poll wait of each ReceiveMessage, in seconds. The default 0 (short polls with an idle
   * back-off up to 1 s) keeps a receive from straddling a disable: moto marks a message received
   * even when the long poll that took it is no longer wanted. @default 0
   */
  receiveWaitSeconds?: number;
  /** A mapping read older than this is refreshed before the next receive, in ms. @default 100 */
  stateMaxAgeMs?: number;
  /**
   * Start (and init) every execution environment the deployed concurrency allows before
   * polling begins, like provisioned concurrency: the first wave of records then does not
   * share the CPU with a burst of cold starts (seconds each for a large bundle on a loaded
   * two-core machine). Environments that time out or crash are replaced by cold ones. @default false
   */
  prewarm?: boolean;
  /** Called for configuration changes and invocation failures (the CLI shows some of them). */
  onEvent?: (event: RuntimeEvent) => void;
}

export type RuntimeEvent =
  | { type: 'limit'; functionName: string; uuid: string; limit: number; enabled: boolean }
  | { type: 'invoke-error'; functionName: string; errorType: string; errorMessage: string }
  | { type: 'timeout'; functionName: string; timeoutSeconds: number }
  | { type: 'rule'; ruleName: string; functionName: string }
  | { type: 'error'; where: string; message: string };

export interface FunctionStats {
  invocations: number;
  inFlight: number;
  maxInFlight: number;
  errors: number;
  timeouts: number;
  throttles: number;
  reservedConcurrency: number | undefined;
}

export interface MappingStats {
  uuid: string;
  functionName: string;
  queueArn: string;
  enabled: boolean;
  batchSize: number;
  maximumConcurrency: number | undefined;
  /** Concurrency the poller uses now: min(reserved, maximum), 0 when disabled. */
  limit: number;
  received: number;
  deleted: number;
  failedItems: number;
}

export interface RuntimeStats {
  functions: Record<string, FunctionStats>;
  mappings: MappingStats[];
  rules: { name: string; schedule: string; periodMs: number | undefined; fired: number; skipped: number }[];
}

interface InvokeResult {
  ok: boolean;
  payload?: unknown;
  error?: { errorType: string; errorMessage: string };
  timedOut?: boolean;
}

interface DeployedFunction {
  name: string;
  arn: string;
  handler: string;
  timeoutSeconds: number;
  memorySize: number;
  runtime: string;
  env: Record<string, string>;
  codeSha: string;
  taskRoot: string;
}

const THREAD_BOOTSTRAP = new URL('./lambda-environment.mjs', import.meta.url);
const DEFAULT_REFRESH_MS = 500;

function errorMessage(err: unknown): string {
  return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
}

/** Parses `rate(5 minutes)` into ms; `cron(...)` and anything else gives undefined. */
export function ratePeriodMs(expression: string | undefined): number | undefined {
  const match = /^rate\(\s*(\d+)\s+(minute|minutes|hour|hours|day|days)\s*\)$/.exec(expression?.trim() ?? '');
  if (!match) return undefined;
  const unit = match[2]!.startsWith('minute')
    ? 60_000
    : match[2]!.startsWith('hour')
      ? 3_600_000
      : 86_400_000;
  return Number(match[1]) * unit;
}

/** Lambda's SQS record shape for one received message. */
export function toSqsRecord(message: Message, queueArn: string, region: string): Record<string, unknown> {
  const messageAttributes: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(message.MessageAttributes ?? {})) {
    messageAttributes[name] = {
      stringValue: value.StringValue,
      binaryValue: value.BinaryValue ? Buffer.from(value.BinaryValue).toString('base64') : undefined,
      stringListValues: value.StringListValues ?? [],
      binaryListValues: (value.BinaryListValues ?? []).map((b) => Buffer.from(b).toString('base64')),
      dataType: value.DataType,
    };
  }
  return {
    messageId: message.MessageId,
    receiptHandle: message.ReceiptHandle,
    body: message.Body ?? '',
    attributes: { ...(message.Attributes ?? {}) },
    messageAttributes,
    md5OfBody: message.MD5OfBody,
    ...(message.MD5OfMessageAttributes ? { md5OfMessageAttributes: message.MD5OfMessageAttributes } : {}),
    eventSource: 'aws:sqs',
    eventSourceARN: queueArn,
    awsRegion: region,
  };
}

/**
 * Which messages of a batch succeeded, by Lambda's rules for partial batch responses: with
 * ReportBatchItemFailures, every message not listed in `batchItemFailures`; a malformed
 * response or an identifier that is empty or not in the batch fails the whole batch.
 */
export function succeededMessageIds(
  messageIds: string[],
  result: InvokeResult,
  reportBatchItemFailures: boolean,
): string[] {
  if (!result.ok) return [];
  if (!reportBatchItemFailures) return messageIds;
  const payload = result.payload as { batchItemFailures?: unknown } | null | undefined;
  if (payload === null || payload === undefined || typeof payload !== 'object') return messageIds;
  const failures = payload.batchItemFailures;
  if (failures === undefined || failures === null) return messageIds;
  if (!Array.isArray(failures)) return [];
  const failed = new Set<string>();
  for (const item of failures) {
    const id = (item as { itemIdentifier?: unknown } | null)?.itemIdentifier;
    if (typeof id !== 'string' || id === '' || !messageIds.includes(id)) return [];
    failed.add(id);
  }
  return messageIds.filter((id) => !failed.has(id));
}

/** Writes lines to a file, replacing secrets first. */
class LogSink {
  private readonly stream: WriteStream;
  constructor(
    file: string,
    private readonly redact: string[],
  ) {
    mkdirSync(dirname(file), { recursive: true });
    this.stream = createWriteStream(file, { flags: 'a' });
  }
  line(text: string): void {
    let out = text;
    for (const secret of this.redact) if (secret) out = out.split(secret).join('***');
    this.stream.write(`${new Date().toISOString()} ${out}\n`);
  }
  close(): Promise<void> {
    return new Promise((resolve) => this.stream.end(resolve));
  }
}

/** One worker thread = one execution environment, reused between invocations like a warm Lambda. */
class ExecutionEnvironment {
  readonly id: string;
  private readonly worker: Worker;
  private pending: { id: string; resolve: (r: InvokeResult) => void } | undefined;
  /** Resolves after the init phase: undefined when the handler loaded, else the init error. */
  private readonly ready: Promise<{ errorType: string; errorMessage: string } | undefined>;
  private markReady: (error?: { errorType: string; errorMessage: string }) => void = () => undefined;
  dead = false;

  constructor(
    readonly fn: DeployedFunction,
    awsEnv: Record<string, string>,
    log: LogSink,
  ) {
    this.id = randomUUID().slice(0, 8);
    const region = awsEnv.AWS_REGION ?? 'us-east-1';
    const env: Record<string, string> = {
      ...fn.env,
      ...awsEnv,
      AWS_LAMBDA_FUNCTION_NAME: fn.name,
      AWS_LAMBDA_FUNCTION_VERSION: '$LATEST',
      AWS_LAMBDA_FUNCTION_MEMORY_SIZE: String(fn.memorySize),
      AWS_LAMBDA_LOG_GROUP_NAME: `/aws/lambda/${fn.name}`,
      AWS_LAMBDA_LOG_STREAM_NAME: `local/${this.id}`,
      AWS_EXECUTION_ENV: `AWS_Lambda_${fn.runtime}`,
      AWS_LAMBDA_INITIALIZATION_TYPE: 'on-demand',
      AWS_REGION: region,
      AWS_DEFAULT_REGION: region,
      LAMBDA_TASK_ROOT: fn.taskRoot,
      _HANDLER: fn.handler,
      // Lambda runs Node 22; the SDK's notice about this machine's Node 20 is noise in the log.
      AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true',
    };
    this.worker = new Worker(THREAD_BOOTSTRAP, {
      env,
      workerData: { taskRoot: fn.taskRoot, handler: fn.handler },
      stdout: true,
      stderr: true,
    });
    for (const stream of [this.worker.stdout, this.worker.stderr]) {
      let buffered = '';
      stream.setEncoding('utf8');
      stream.on('data', (chunk: string) => {
        buffered += chunk;
        const lines = buffered.split('\n');
        buffered = lines.pop() ?? '';
        for (const line of lines) log.line(`${this.id} ${line}`);
      });
      stream.on('end', () => {
        if (buffered) log.line(`${this.id} ${buffered}`);
      });
    }
    this.ready = new Promise((resolve) => {
      this.markReady = resolve;
    });
    this.worker.on(
      'message',
      (msg: { type: string; id: string; ok: boolean; payload?: unknown; error?: never }) => {
        if (msg.type === 'ready' || msg.type === 'init-error') {
          this.markReady(msg.type === 'ready' ? undefined : msg.error);
          return;
        }
        if (msg.type !== 'result' || this.pending?.id !== msg.id) return;
        const { resolve } = this.pending;
        this.pending = undefined;
        resolve({ ok: msg.ok, payload: msg.payload, error: msg.error });
      },
    );
    const fail = (errorType: string, errorMessage: string) => {
      this.dead = true;
      this.markReady({ errorType, errorMessage });
      if (!this.pending) return;
      const { resolve } = this.pending;
      this.pending = undefined;
      resolve({ ok: false, error: { errorType, errorMessage } });
    };
    this.worker.on('error', (err) => fail('Runtime.ExitError', errorMessage(err)));
    this.worker.on('exit', (code) =>
      fail('Runtime.ExitError', `execution environment exited with code ${code}`),
    );
  }

  async whenReady(): Promise<void> {
    await this.ready;
  }

  /**
   * Runs one invocation. The init phase (loading the module) is not part of the function
   * timeout, as in Lambda; on a loaded two-core machine a cold start of a large bundle can
   * take seconds.
   */
  async invoke(event: unknown, requestId: string, region: string): Promise<InvokeResult> {
    const initError = await this.ready;
    if (initError) {
      this.dead = true;
      return { ok: false, error: initError };
    }
    if (this.dead) {
      return {
        ok: false,
        error: { errorType: 'Runtime.ExitError', errorMessage: 'execution environment exited' },
      };
    }
    const timeoutMs = this.fn.timeoutSeconds * 1000;
    const deadlineMs = Date.now() + timeoutMs;
    return new Promise<InvokeResult>((resolve) => {
      const timer = setTimeout(() => {
        if (this.pending?.id !== requestId) return;
        this.pending = undefined;
        this.dead = true;
        void this.worker.terminate();
        resolve({
          ok: false,
          timedOut: true,
          error: {
            errorType: 'Sandbox.Timedout',
            errorMessage: `Task timed out after ${this.fn.timeoutSeconds} seconds`,
          },
        });
      }, timeoutMs);
      this.pending = {
        id: requestId,
        resolve: (r) => {
          clearTimeout(timer);
          resolve(r);
        },
      };
      this.worker.postMessage({
        type: 'invoke',
        id: requestId,
        event,
        context: {
          functionName: this.fn.name,
          functionVersion: '$LATEST',
          invokedFunctionArn: this.fn.arn,
          memoryLimitInMB: String(this.fn.memorySize),
          awsRequestId: requestId,
          logGroupName: `/aws/lambda/${this.fn.name}`,
          logStreamName: `local/${this.id}`,
          deadlineMs,
          region,
        },
      });
    });
  }

  terminate(): Promise<number> {
    this.dead = true;
    return this.worker.terminate();
  }
}

/** A deployed function: its configuration, its idle environments and its counters. */
class FunctionHost {
  readonly stats: FunctionStats = {
    invocations: 0,
    inFlight: 0,
    maxInFlight: 0,
    errors: 0,
    timeouts: 0,
    throttles: 0,
    reservedConcurrency: undefined,
  };
  private idle: ExecutionEnvironment[] = [];
  private readonly busy = new Set<ExecutionEnvironment>();
  private readonly log: LogSink;
  fn: DeployedFunction | undefined;

  constructor(
    readonly name: string,
    private readonly runtime: LocalRuntime,
  ) {
    this.log = new LogSink(join(runtime.options.logDir, `${name}.log`), runtime.options.redact ?? []);
  }

  /** Re-reads configuration and reserved concurrency; new code or env retires idle environments. */
  async refresh(): Promise<void> {
    const out = await this.runtime.lambda.send(new GetFunctionCommand({ FunctionName: this.name }));
    const conf = out.Configuration as FunctionConfiguration;
    const reserved = await this.runtime.lambda.send(
      new GetFunctionConcurrencyCommand({ FunctionName: this.name }),
    );
    this.stats.reservedConcurrency = reserved.ReservedConcurrentExecutions;
    const env = conf.Environment?.Variables ?? {};
    const codeSha = conf.CodeSha256 ?? '';
    const changed =
      !this.fn ||
      this.fn.codeSha !== codeSha ||
      this.fn.handler !== conf.Handler ||
      this.fn.timeoutSeconds !== (conf.Timeout ?? 3) ||
      JSON.stringify(this.fn.env) !== JSON.stringify(env);
    if (!changed) return;
    const taskRoot = await this.runtime.codeDirFor(this.name, codeSha, out.Code?.Location);
    this.fn = {
      name: this.name,
      arn: conf.FunctionArn ?? this.name,
      handler: conf.Handler ?? 'index.handler',
      timeoutSeconds: conf.Timeout ?? 3,
      memorySize: conf.MemorySize ?? 128,
      runtime: conf.Runtime ?? 'nodejs22.x',
      env,
      codeSha,
      taskRoot,
    };
    const stale = this.idle;
    this.idle = [];
    await Promise.all(stale.map((e) => e.terminate()));
  }

  /** Reserved concurrency left for one more invocation (scheduled invocations are throttled beyond it). */
  hasCapacity(): boolean {
    const reserved = this.stats.reservedConcurrency;
    return reserved === undefined || this.stats.inFlight < reserved;
  }

  /** Starts `count` idle environments and waits for their init phase (see LocalRuntimeOptions.prewarm). */
  async prewarm(count: number): Promise<void> {
    const fn = this.fn;
    if (!fn) return;
    const fresh = Array.from(
      { length: Math.max(0, count - this.idle.length) },
      () => new ExecutionEnvironment(fn, this.runtime.options.awsEnv, this.log),
    );
    await Promise.all(fresh.map((e) => e.whenReady()));
    this.idle.push(...fresh.filter((e) => !e.dead));
  }

  async invoke(event: unknown): Promise<InvokeResult> {
    const fn = this.fn;
    if (!fn) throw new Error(`function ${this.name} is not loaded`);
    const requestId = randomUUID();
    const env = this.idle.pop() ?? new ExecutionEnvironment(fn, this.runtime.options.awsEnv, this.log);
    this.busy.add(env);
    this.stats.invocations++;
    this.stats.inFlight++;
    this.stats.maxInFlight = Math.max(this.stats.maxInFlight, this.stats.inFlight);
    this.log.line(`${env.id} START RequestId: ${requestId}`);
    const started = Date.now();
    try {
      const result = await env.invoke(event, requestId, this.runtime.region);
      if (!result.ok) {
        this.stats.errors++;
        if (result.timedOut) {
          this.stats.timeouts++;
          this.runtime.emit({ type: 'timeout', functionName: this.name, timeoutSeconds: fn.timeoutSeconds });
        } else {
          this.runtime.emit({
            type: 'invoke-error',
            functionName: this.name,
            errorType: result.error?.errorType ?? 'Error',
            errorMessage: result.error?.errorMessage ?? '',
          });
        }
        this.log.line(`${env.id} ERROR ${result.error?.errorType}: ${result.error?.errorMessage}`);
      }
      return result;
    } finally {
      this.stats.inFlight--;
      this.busy.delete(env);
      this.log.line(`${env.id} END RequestId: ${requestId} Duration: ${Date.now() - started} ms`);
      if (!env.dead && this.fn === fn && !this.runtime.stopped) this.idle.push(env);
      else void env.terminate();
    }
  }

  async stop(): Promise<void> {
    const all = [...this.idle, ...this.busy];
    this.idle = [];
    await Promise.all(all.map((e) => e.terminate()));
    await this.log.close();
  }
}

/**
 * Lambda's SQS poller for one event source mapping. Up to `limit` loops receive batches; a
 * received batch is invoked only while fewer than `limit` invocations of this mapping run,
 * so the limit holds even right after it drops. The mapping is re-read before each receive
 * (at most every `stateMaxAgeMs`), and a batch received just before the mapping was disabled
 * is made visible again instead of being invoked.
 */
class SqsPoller {
  readonly stats: MappingStats;
  private queueUrl: string | undefined;
  private reportBatchItemFailures = false;
  private loops = 0;
  private active = 0;
  private readonly running: Promise<void>[] = [];
  private wake: (() => void)[] = [];
  private lastRead = 0;
  private reading: Promise<void> | undefined;

  constructor(
    private readonly runtime: LocalRuntime,
    private readonly host: FunctionHost,
    mapping: EventSourceMappingConfiguration,
  ) {
    this.stats = {
      uuid: mapping.UUID ?? '',
      functionName: host.name,
      queueArn: mapping.EventSourceArn ?? '',
      enabled: false,
      batchSize: 10,
      maximumConcurrency: undefined,
      limit: 0,
      received: 0,
      deleted: 0,
      failedItems: 0,
    };
  }

  /** Re-reads the mapping; more loops start when the limit grows, surplus ones idle when it falls. */
  async refresh(): Promise<void> {
    if (!this.queueUrl) {
      const [, , , , account, queueName] = this.stats.queueArn.split(':');
      const q = await this.runtime.sqs.send(
        new GetQueueUrlCommand({ QueueName: queueName, QueueOwnerAWSAccountId: account }),
      );
      this.queueUrl = q.QueueUrl;
    }
    await this.readMapping();
    while (this.loops < this.stats.limit) {
      const index = this.loops++;
      this.running.push(this.loop(index));
    }
  }

  /** The mapping as of at most `stateMaxAgeMs` ago. */
  private fresh(): Promise<void> {
    if (Date.now() - this.lastRead <= this.runtime.stateMaxAgeMs) return Promise.resolve();
    this.reading ??= this.readMapping().finally(() => {
      this.reading = undefined;
    });
    return this.reading;
  }

  private async readMapping(): Promise<void> {
    const m = await this.runtime.lambda.send(new GetEventSourceMappingCommand({ UUID: this.stats.uuid }));
    this.lastRead = Date.now();
    const state = m.State ?? 'Enabled';
    const enabled =
      state === 'Enabled' || state === 'Enabling' || state === 'Updating' || state === 'Creating';
    const batchSize = Math.max(1, Math.min(m.BatchSize ?? 10, 10));
    const maximum = m.ScalingConfig?.MaximumConcurrency;
    const reserved = this.host.stats.reservedConcurrency;
    // unreservedLimit stands in for the account's unreserved pool only when neither knob is set.
    const limit = !enabled
      ? 0
      : reserved === undefined && maximum === undefined
        ? this.runtime.unreservedLimit
        : Math.min(reserved ?? Number.POSITIVE_INFINITY, maximum ?? Number.POSITIVE_INFINITY);
    this.reportBatchItemFailures = (m.FunctionResponseTypes ?? []).includes('ReportBatchItemFailures');
    const changed = limit !== this.stats.limit || enabled !== this.stats.enabled;
    Object.assign(this.stats, { enabled, batchSize, maximumConcurrency: maximum, limit });
    if (changed) {
      this.runtime.emit({
        type: 'limit',
        functionName: this.host.name,
        uuid: this.stats.uuid,
        limit,
        enabled,
      });
      this.runtime.runtimeLog.line(
        `mapping ${this.stats.uuid} → ${this.host.name}: ${enabled ? 'enabled' : 'disabled'}, concurrency ${limit} (reserved ${reserved ?? 'none'}, maximum ${maximum ?? 'none'})`,
      );
    }
    this.wakeAll();
  }

  private wakeAll(): void {
    for (const w of this.wake.splice(0)) w();
  }

  private waitForChange(ms = this.runtime.refreshMs): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.wake.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  /**
   * moto picks and marks messages in ReceiveMessage without a lock, so two concurrent receives
   * can be handed the same message (seen: an unkeyed bad message copied to the DLQ twice).
   * The slots of one mapping therefore receive one at a time; the receive is short next to a
   * solve, so this costs no concurrency.
   */
  private receiveChain: Promise<unknown> = Promise.resolve();
  private oneReceiveAtATime<T>(receive: () => Promise<T>): Promise<T> {
    const run = this.receiveChain.then(receive, receive);
    this.receiveChain = run.catch(() => undefined);
    return run;
  }

  private async loop(index: number): Promise<void> {
    let idleMs = 0;
    while (!this.runtime.stopped) {
      if (!this.stats.enabled || index >= this.stats.limit || !this.host.fn || !this.queueUrl) {
        await this.waitForChange();
        continue;
      }
      if (idleMs > 0) await sleep(idleMs);
      let messages: Message[];
      try {
        await this.fresh();
        if (!this.stats.enabled || index >= this.stats.limit) continue;
        const queueUrl = this.queueUrl;
        const out = await this.oneReceiveAtATime(() =>
          this.runtime.sqs.send(
            new ReceiveMessageCommand({
              QueueUrl: queueUrl,
              MaxNumberOfMessages: this.stats.batchSize,
              WaitTimeSeconds: this.runtime.receiveWaitSeconds,
              MessageSystemAttributeNames: ['All'],
              MessageAttributeNames: ['All'],
            }),
          ),
        );
        messages = out.Messages ?? [];
      } catch (err) {
        if (this.runtime.stopped) return;
        this.runtime.emit({
          type: 'error',
          where: `receive ${this.stats.queueArn}`,
          message: errorMessage(err),
        });
        await sleep(1000);
        continue;
      }
      if (this.runtime.stopped) return;
      if (messages.length === 0) {
        // An empty queue: back off up to one second between short polls.
        idleMs = Math.min(1000, Math.max(50, idleMs * 2));
        continue;
      }
      idleMs = 0;
      this.stats.received += messages.length;
      await this.dispatch(messages);
    }
  }

  /** Invokes the batch once a slot is free; a batch received as the mapping was disabled goes back to the queue. */
  private async dispatch(messages: Message[]): Promise<void> {
    try {
      await this.fresh();
    } catch {
      // Keep the last known state.
    }
    while (!this.runtime.stopped && this.stats.enabled && this.active >= this.stats.limit) {
      await this.waitForChange();
    }
    if (this.runtime.stopped) return;
    if (!this.stats.enabled) {
      await this.release(messages);
      return;
    }
    this.active++;
    try {
      await this.process(messages);
    } finally {
      this.active--;
      this.wakeAll();
    }
  }

  private async release(messages: Message[]): Promise<void> {
    try {
      await this.runtime.sqs.send(
        new ChangeMessageVisibilityBatchCommand({
          QueueUrl: this.queueUrl,
          Entries: messages.map((m, n) => ({
            Id: String(n),
            ReceiptHandle: m.ReceiptHandle,
            VisibilityTimeout: 0,
          })),
        }),
      );
    } catch (err) {
      this.runtime.emit({
        type: 'error',
        where: `release ${this.stats.queueArn}`,
        message: errorMessage(err),
      });
    }
  }

  private async process(messages: Message[]): Promise<void> {
    const records = messages.map((m) => toSqsRecord(m, this.stats.queueArn, this.runtime.region));
    let result: InvokeResult;
    try {
      result = await this.host.invoke({ Records: records });
    } catch (err) {
      result = { ok: false, error: { errorType: 'Runtime.Error', errorMessage: errorMessage(err) } };
    }
    if (this.runtime.stopped) return;
    const ids = messages.map((m) => m.MessageId ?? '');
    const succeeded = new Set(succeededMessageIds(ids, result, this.reportBatchItemFailures));
    this.stats.failedItems += ids.length - succeeded.size;
    const toDelete = messages.filter((m) => succeeded.has(m.MessageId ?? ''));
    for (let i = 0; i < toDelete.length; i += 10) {
      const chunk = toDelete.slice(i, i + 10);
      try {
        const out = await this.runtime.sqs.send(
          new DeleteMessageBatchCommand({
            QueueUrl: this.queueUrl,
            Entries: chunk.map((m, n) => ({ Id: String(n), ReceiptHandle: m.ReceiptHandle })),
          }),
        );
        this.stats.deleted += out.Successful?.length ?? 0;
      } catch (err) {
        this.runtime.emit({
          type: 'error',
          where: `delete ${this.stats.queueArn}`,
          message: errorMessage(err),
        });
      }
    }
  }

  async stop(): Promise<void> {
    this.wakeAll();
    await Promise.allSettled(this.running);
  }
}

/** EventBridge's scheduler for one rule with Lambda targets. */
class RuleTimer {
  fired = 0;
  skipped = 0;
  private readonly running = new Set<string>();
  periodMs: number | undefined;
  private timer: NodeJS.Timeout | undefined;
  private targets: Target[] = [];
  private enabled = false;
  private warned = false;

  constructor(
    private readonly runtime: LocalRuntime,
    readonly name: string,
    readonly arn: string,
    public schedule: string,
  ) {}

  update(rule: Rule, targets: Target[]): void {
    this.targets = targets;
    const enabled = rule.State === 'ENABLED';
    const period = ratePeriodMs(rule.ScheduleExpression);
    if (period === undefined && !this.warned) {
      this.warned = true;
      this.runtime.runtimeLog.line(
        `rule ${this.name}: schedule ${rule.ScheduleExpression} is not supported locally`,
      );
    }
    const scaled = period === undefined ? undefined : Math.max(50, period * this.runtime.timeScale);
    if (scaled === this.periodMs && enabled === this.enabled) return;
    this.schedule = rule.ScheduleExpression ?? '';
    this.periodMs = scaled;
    this.enabled = enabled;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    if (enabled && scaled !== undefined) {
      this.timer = setInterval(() => void this.fire(), scaled);
      this.runtime.runtimeLog.line(`rule ${this.name}: ${this.schedule} fires every ${scaled} ms`);
    }
  }

  private async fire(): Promise<void> {
    this.fired++;
    const now = new Date();
    for (const target of this.targets) {
      const functionName = target.Arn?.split(':')[6];
      const host = functionName ? this.runtime.hostFor(functionName) : undefined;
      if (!host?.fn) continue;
      if (!host.hasCapacity()) {
        host.stats.throttles++;
        continue;
      }
      const event = target.Input
        ? JSON.parse(target.Input)
        : {
            version: '0',
            id: randomUUID(),
            'detail-type': 'Scheduled Event',
            source: 'aws.events',
            account: this.arn.split(':')[4] ?? '',
            time: `${now.toISOString().slice(0, 19)}Z`,
            region: this.runtime.region,
            resources: [this.arn],
            detail: {},
          };
      // A tick that finds this rule's previous invocation still running is skipped. EventBridge
      // would overlap them, but at a scaled rate (0.6 s for a one-minute rule) a slow cold
      // start on a small machine would otherwise pile up environments faster than they finish.
      if (this.running.has(host.name)) {
        this.skipped++;
        continue;
      }
      this.running.add(host.name);
      this.runtime.emit({ type: 'rule', ruleName: this.name, functionName: host.name });
      void host
        .invoke(event)
        .catch(() => undefined)
        .finally(() => this.running.delete(host.name));
    }
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }
}

export class LocalRuntime {
  readonly lambda: LambdaClient;
  readonly sqs: SQSClient;
  readonly s3: S3Client;
  readonly events: EventBridgeClient;
  readonly region: string;
  readonly timeScale: number;
  readonly refreshMs: number;
  readonly unreservedLimit: number;
  readonly receiveWaitSeconds: number;
  readonly stateMaxAgeMs: number;
  readonly runtimeLog: LogSink;
  stopped = false;
  private readonly hosts = new Map<string, FunctionHost>();
  private readonly pollers = new Map<string, SqsPoller>();
  private readonly rules = new Map<string, RuleTimer>();
  private readonly codeDirs = new Map<string, Promise<string>>();
  private refreshTimer: NodeJS.Timeout | undefined;
  private refreshing: Promise<void> | undefined;

  private constructor(readonly options: LocalRuntimeOptions) {
    const env = options.awsEnv;
    this.region = env.AWS_REGION ?? env.AWS_DEFAULT_REGION ?? 'us-east-1';
    const clientConfig = {
      endpoint: env.AWS_ENDPOINT_URL,
      region: this.region,
      credentials: {
        accessKeyId: env.AWS_ACCESS_KEY_ID ?? 'testing',
        secretAccessKey: env.AWS_SECRET_ACCESS_KEY ?? 'testing',
      },
    };
    this.lambda = new LambdaClient(clientConfig);
    this.sqs = new SQSClient(clientConfig);
    this.s3 = new S3Client({ ...clientConfig, forcePathStyle: true });
    this.events = new EventBridgeClient(clientConfig);
    this.timeScale = options.timeScale ?? 1;
    this.refreshMs = options.refreshMs ?? DEFAULT_REFRESH_MS;
    this.unreservedLimit = options.unreservedLimit ?? 10;
    this.receiveWaitSeconds = options.receiveWaitSeconds ?? 0;
    this.stateMaxAgeMs = options.stateMaxAgeMs ?? 100;
    this.runtimeLog = new LogSink(join(options.logDir, 'runtime.log'), options.redact ?? []);
  }

  /** Reads the deployed configuration, loads the functions' code and starts polling and scheduling. */
  static async start(options: LocalRuntimeOptions): Promise<LocalRuntime> {
    const runtime = new LocalRuntime(options);
    await runtime.refresh(options.prewarm ?? false);
    runtime.scheduleRefresh();
    return runtime;
  }

  emit(event: RuntimeEvent): void {
    if (event.type === 'error') this.runtimeLog.line(`error in ${event.where}: ${event.message}`);
    this.options.onEvent?.(event);
  }

  hostFor(functionName: string): FunctionHost | undefined {
    return this.hosts.get(functionName);
  }

  private wanted(functionName: string): boolean {
    return !this.options.functionNames || this.options.functionNames.includes(functionName);
  }

  private ensureHost(functionName: string): FunctionHost {
    let host = this.hosts.get(functionName);
    if (!host) {
      host = new FunctionHost(functionName, this);
      this.hosts.set(functionName, host);
    }
    return host;
  }

  private scheduleRefresh(): void {
    if (this.stopped) return;
    this.refreshTimer = setTimeout(async () => {
      try {
        await this.refresh();
      } catch (err) {
        if (!this.stopped) this.emit({ type: 'error', where: 'refresh', message: errorMessage(err) });
      }
      this.scheduleRefresh();
    }, this.refreshMs);
  }

  /** Re-reads mappings, functions and rules now (also runs every `refreshMs`). */
  refresh(prewarm = false): Promise<void> {
    this.refreshing ??= this.doRefresh(prewarm).finally(() => {
      this.refreshing = undefined;
    });
    return this.refreshing;
  }

  private async doRefresh(prewarm = false): Promise<void> {
    const mappings: EventSourceMappingConfiguration[] = [];
    let marker: string | undefined;
    do {
      const out = await this.lambda.send(new ListEventSourceMappingsCommand({ Marker: marker }));
      mappings.push(...(out.EventSourceMappings ?? []));
      marker = out.NextMarker;
    } while (marker);
    const sqsMappings = mappings.filter(
      (m) => m.EventSourceArn?.startsWith('arn:aws:sqs:') && this.wanted(m.FunctionArn?.split(':')[6] ?? ''),
    );

    const rules: { rule: Rule; targets: Target[] }[] = [];
    let next: string | undefined;
    do {
      const out = await this.events.send(new ListRulesCommand({ NextToken: next }));
      for (const rule of out.Rules ?? []) {
        if (!rule.ScheduleExpression || !rule.Name) continue;
        const t = await this.events.send(new ListTargetsByRuleCommand({ Rule: rule.Name }));
        const targets = (t.Targets ?? []).filter(
          (x) => x.Arn?.startsWith('arn:aws:lambda:') && this.wanted(x.Arn.split(':')[6] ?? ''),
        );
        if (targets.length) rules.push({ rule, targets });
      }
      next = out.NextToken;
    } while (next);

    for (const m of sqsMappings) this.ensureHost(m.FunctionArn?.split(':')[6] ?? '');
    for (const { targets } of rules) for (const t of targets) this.ensureHost(t.Arn?.split(':')[6] ?? '');
    await Promise.all([...this.hosts.values()].map((h) => h.refresh()));

    if (prewarm) {
      // Init every environment the pollers may use (and one per scheduled target) before polling starts.
      const wanted = new Map<FunctionHost, number>();
      for (const m of sqsMappings) {
        const host = this.ensureHost(m.FunctionArn?.split(':')[6] ?? '');
        const mapping = await this.lambda.send(new GetEventSourceMappingCommand({ UUID: m.UUID }));
        const limit = Math.min(
          host.stats.reservedConcurrency ?? this.unreservedLimit,
          mapping.ScalingConfig?.MaximumConcurrency ?? this.unreservedLimit,
        );
        wanted.set(host, (wanted.get(host) ?? 0) + limit);
      }
      for (const { targets } of rules) {
        for (const t of targets) {
          const host = this.ensureHost(t.Arn?.split(':')[6] ?? '');
          wanted.set(host, Math.max(1, wanted.get(host) ?? 0));
        }
      }
      await Promise.all([...wanted].map(([host, count]) => host.prewarm(count)));
    }

    for (const m of sqsMappings) {
      const uuid = m.UUID ?? '';
      let poller = this.pollers.get(uuid);
      if (!poller) {
        const host = this.ensureHost(m.FunctionArn?.split(':')[6] ?? '');
        poller = new SqsPoller(this, host, m);
        this.pollers.set(uuid, poller);
      }
      await poller.refresh();
    }
    for (const { rule, targets } of rules) {
      const name = rule.Name ?? '';
      let timer = this.rules.get(name);
      if (!timer) {
        timer = new RuleTimer(this, name, rule.Arn ?? '', rule.ScheduleExpression ?? '');
        this.rules.set(name, timer);
      }
      timer.update(rule, targets);
    }
  }

  /** The function's unzipped code: an override, else the zip `cdk deploy` uploaded to the emulator's S3. */
  codeDirFor(functionName: string, codeSha: string, location: string | undefined): Promise<string> {
    const override = this.options.codeDirs?.[functionName];
    if (override) return Promise.resolve(override);
    const key = `${codeSha}|${location ?? ''}`;
    let dir = this.codeDirs.get(key);
    if (!dir) {
      dir = this.fetchCode(codeSha, location);
      this.codeDirs.set(key, dir);
      dir.catch(() => this.codeDirs.delete(key));
    }
    return dir;
  }

  private async fetchCode(codeSha: string, location: string | undefined): Promise<string> {
    const cacheRoot = this.options.codeCacheDir ?? join(this.options.logDir, 'code');
    const dir = join(cacheRoot, codeSha.replace(/[^A-Za-z0-9]/g, '_') || randomUUID());
    if (existsSync(join(dir, '.complete'))) return dir;
    const objectKey = location ? decodeURIComponent(new URL(location).pathname.replace(/^\/+/, '')) : '';
    if (!objectKey) throw new Error(`no code location for ${codeSha}`);
    const buckets = (await this.s3.send(new ListBucketsCommand({}))).Buckets ?? [];
    // cdk deploy puts assets in the bootstrap bucket (cdk-<qualifier>-assets-<account>-<region>); look there first.
    buckets.sort((a, b) => Number(b.Name?.includes('-assets-')) - Number(a.Name?.includes('-assets-')));
    let zip: Buffer | undefined;
    for (const bucket of buckets) {
      try {
        const obj = await this.s3.send(new GetObjectCommand({ Bucket: bucket.Name, Key: objectKey }));
        zip = Buffer.from(await obj.Body!.transformToByteArray());
        break;
      } catch (err) {
        if ((err as { name?: string }).name !== 'NoSuchKey') throw err;
      }
    }
    if (!zip) throw new Error(`code object ${objectKey} not found in the emulator's S3 buckets`);
    const staging = `${dir}.${process.pid}.${randomUUID().slice(0, 8)}`;
    for (const entry of readZip(zip)) {
      const target = normalize(join(staging, entry.name));
      if (!target.startsWith(staging)) throw new Error(`zip entry escapes the code folder: ${entry.name}`);
      mkdirSync(dirname(target), { recursive: true });
      writeFileSync(target, entry.data);
    }
    // Lambda loads a `.js` handler without a package.json above it as CommonJS. The cache may sit
    // inside an ESM package (this repository is one), so say what Lambda would assume.
    if (!existsSync(join(staging, 'package.json'))) {
      writeFileSync(join(staging, 'package.json'), '{"type":"commonjs"}\n');
    }
    writeFileSync(join(staging, '.complete'), '');
    try {
      mkdirSync(dirname(dir), { recursive: true });
      renameSync(staging, dir);
    } catch {
      // Another runtime unpacked the same code first; use theirs.
      rmSync(staging, { recursive: true, force: true });
    }
    return dir;
  }

  stats(): RuntimeStats {
    const functions: Record<string, FunctionStats> = {};
    for (const [name, host] of this.hosts) functions[name] = { ...host.stats };
    return {
      functions,
      mappings: [...this.pollers.values()].map((p) => ({ ...p.stats })),
      rules: [...this.rules.values()].map((r) => ({
        name: r.name,
        schedule: r.schedule,
        periodMs: r.periodMs,
        fired: r.fired,
        skipped: r.skipped,
      })),
    };
  }

  /** Stops polling and scheduling, terminates every execution environment (running invocations are cut off). */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.refreshTimer) clearTimeout(this.refreshTimer);
    for (const r of this.rules.values()) r.stop();
    await this.refreshing?.catch(() => undefined);
    await Promise.all([...this.hosts.values()].map((h) => h.stop()));
    await Promise.all([...this.pollers.values()].map((p) => p.stop()));
    await this.runtimeLog.close();
  }
}
