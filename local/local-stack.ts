import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { LambdaClient } from '@aws-sdk/client-lambda';
import {
  GetQueueAttributesCommand,
  type MessageAttributeValue,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { SSMClient } from '@aws-sdk/client-ssm';
import { DynamoDBDocumentClient, ScanCommand } from '@aws-sdk/lib-dynamodb';
import { PipelineControl, type PipelineState } from '../functions/shared/pipeline-control.js';
import { type CaptchaStandin, type FaultRates, startCaptchaStandin } from './captchaai-standin.js';
import {
  clientConfig,
  type DeployResult,
  deployToEmulator,
  REPO_ROOT,
  readStackOutputs,
  type StackOutputs,
  type StackSettings,
} from './deploy.js';
import { type MotoServer, startMoto } from './moto.js';
import { LocalRuntime, type RuntimeEvent } from './runtime.js';
import { startTargetStandin, type TargetStandin } from './target-standin.js';

/**
 * The embedded local stack: moto (AWS), the CaptchaAI stand-in and the target-site stand-in,
 * the real CDK app deployed to moto, and the local runtime running its functions. `threadgate
 * local` and the end-to-end tests both build on this.
 *
 * With `target: 'localstack'` nothing is deployed or run here: the stack is expected to be
 * deployed to LocalStack already (docs/local-stack.md "LocalStack"), LocalStack runs the functions, and
 * the stand-ins listen on fixed ports that the deployed stack was pointed at.
 */
export interface LocalStackOptions {
  /** Plan threads of the CaptchaAI stand-in. @default 8 */
  threads?: number;
  /** Plan threads kept free (the cap is threads − reserve). @default 2 */
  reserve?: number;
  /** Multiplies CaptchaAI latencies, the client's waits and the one-minute rule. @default 0.01 */
  timeScale?: number;
  /** Stand-in faults from the start. */
  faults?: Partial<FaultRates>;
  /** Extra infra/config.ts settings (they join the synth cache key). */
  settings?: StackSettings;
  /** Logs go here. @default <repo>/.local-stack/runs/<time>-<random> */
  logDir?: string;
  /** Synthesize even when a cached assembly exists. */
  freshSynth?: boolean;
  /** `moto` (default): everything here. `localstack`: use a stack already deployed to LocalStack. */
  target?: 'moto' | 'localstack';
  /** Phase messages ("deploying …") for a progress display. */
  onPhase?: (message: string) => void;
  onRuntimeEvent?: (event: RuntimeEvent) => void;
}

export interface LocalStack {
  target: 'moto' | 'localstack';
  awsEnv: Record<string, string>;
  outputs: StackOutputs;
  stackName: string;
  /** Only for moto: the emulator, deploy timings and the runtime. */
  moto: MotoServer | undefined;
  deploy: DeployResult | undefined;
  runtime: LocalRuntime | undefined;
  captcha: CaptchaStandin;
  /** The target-site stand-in (forms at /form/<record key>). */
  site: TargetStandin;
  apiKey: string;
  threads: number;
  reserve: number;
  timeScale: number;
  logDir: string;
  sqs: SQSClient;
  lambda: LambdaClient;
  ssm: SSMClient;
  documents: DynamoDBDocumentClient;
  control: PipelineControl;
  stop(): Promise<void>;
}

export const FINAL_STATUSES = ['submitted', 'failed', 'rejected'] as const;

export interface OutcomeRow {
  record_key: string;
  status: string;
  reason?: string;
  attempts?: number;
  target_status?: number;
  captcha_type?: string;
  [key: string]: unknown;
}

export interface DlqEntry {
  messageId: string;
  body: string;
  recordKey?: string;
  errorCode?: string;
  reason?: string;
}

/** The stack settings the local stack deploys with (stand-in URL and the time-scaled waits). */
export function localSettings(o: {
  threads: number;
  reserve: number;
  timeScale: number;
  captchaaiUrl: string;
  allowedHosts?: string[];
  extra?: StackSettings;
}): StackSettings {
  return {
    stackName: 'Threadgate',
    timeScale: o.timeScale,
    reserve: o.reserve,
    // The adjuster sets the cap from threadsinfo on its first tick; start where it will land.
    initialCap: Math.max(1, o.threads - o.reserve),
    allowedHosts: o.allowedHosts ?? ['127.0.0.1', 'localhost'],
    captchaaiUrl: o.captchaaiUrl,
    // Loopback targets answer at once; the cool-down after a deadline is scaled like the deadline.
    targetTimeoutMs: 5000,
    cooldownMs: Math.round(60_000 * o.timeScale),
    ...o.extra,
  };
}

function runDir(): string {
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  return join(REPO_ROOT, '.local-stack', 'runs', `${stamp}-${randomBytes(3).toString('hex')}`);
}

export async function startLocalStack(options: LocalStackOptions = {}): Promise<LocalStack> {
  const target =
    options.target ?? (process.env.THREADGATE_E2E_TARGET === 'localstack' ? 'localstack' : 'moto');
  const threads = options.threads ?? 8;
  const reserve = options.reserve ?? 2;
  const timeScale = options.timeScale ?? 0.01;
  const logDir = options.logDir ?? runDir();
  mkdirSync(logDir, { recursive: true });
  const phase = options.onPhase ?? (() => undefined);
  const cleanups: (() => Promise<unknown>)[] = [];
  const stopAll = async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
  };

  try {
    const local = target === 'localstack';
    // LocalStack runs the functions in containers: they reach the stand-ins on fixed ports of the host.
    const apiKey = local
      ? (process.env.THREADGATE_LOCALSTACK_API_KEY ?? 'threadgate-localstack-key')
      : randomBytes(16).toString('hex');
    phase('starting the CaptchaAI stand-in');
    const captcha = await startCaptchaStandin({
      threads,
      apiKey,
      timeScale,
      faults: options.faults,
      port: local ? Number(process.env.THREADGATE_STANDIN_PORT ?? 8931) : 0,
      host: local ? '0.0.0.0' : '127.0.0.1',
    });
    cleanups.push(() => captcha.close());
    const targetSite = await startTargetStandin({
      captchaUrl: captcha.url,
      port: local ? Number(process.env.THREADGATE_TARGET_PORT ?? 8932) : 0,
      host: local ? '0.0.0.0' : '127.0.0.1',
    });
    cleanups.push(() => targetSite.close());
    // Records must name the target as the functions see it: from LocalStack's Lambda containers
    // that is the Docker host (THREADGATE_STANDIN_HOST, default host.docker.internal).
    const site: TargetStandin = local
      ? {
          ...targetSite,
          url: `http://${process.env.THREADGATE_STANDIN_HOST ?? 'host.docker.internal'}:${targetSite.port}`,
        }
      : targetSite;

    let moto: MotoServer | undefined;
    let deploy: DeployResult | undefined;
    let runtime: LocalRuntime | undefined;
    let awsEnv: Record<string, string>;
    let outputs: StackOutputs;
    let stackName = String(options.settings?.stackName ?? 'Threadgate');
    if (local) {
      awsEnv = {
        AWS_ENDPOINT_URL: process.env.AWS_ENDPOINT_URL ?? 'http://localhost:4566',
        AWS_REGION: process.env.AWS_REGION ?? 'us-east-1',
        AWS_ACCESS_KEY_ID: process.env.AWS_ACCESS_KEY_ID ?? 'test',
        AWS_SECRET_ACCESS_KEY: process.env.AWS_SECRET_ACCESS_KEY ?? 'test',
      };
      stackName = process.env.THREADGATE_STACK ?? stackName;
      outputs = await readStackOutputs(awsEnv, stackName);
    } else {
      phase('starting moto');
      moto = await startMoto();
      cleanups.push(() => moto?.stop() ?? Promise.resolve());
      awsEnv = moto.awsEnv;
      phase('deploying the CDK app to moto (synth is cached between runs)');
      deploy = await deployToEmulator({
        awsEnv,
        apiKey,
        settings: localSettings({
          threads,
          reserve,
          timeScale,
          captchaaiUrl: captcha.url,
          extra: options.settings,
        }),
        logFile: join(logDir, 'deploy.log'),
        freshSynth: options.freshSynth,
      });
      const runAssembly = deploy.assemblyDir;
      cleanups.push(async () => rmSync(runAssembly, { recursive: true, force: true }));
      outputs = deploy.outputs;
      stackName = deploy.stackName;
      phase('starting the local runtime');
      runtime = await LocalRuntime.start({
        awsEnv,
        logDir,
        timeScale,
        redact: [apiKey],
        codeCacheDir: join(REPO_ROOT, '.local-stack', 'code'),
        prewarm: true,
        onEvent: options.onRuntimeEvent,
      });
      const started = runtime;
      // Stop the runtime before moto: its pollers would otherwise fail against a dead endpoint.
      cleanups.push(() => started.stop());
    }

    const config = clientConfig(awsEnv);
    const sqs = new SQSClient(config);
    const lambda = new LambdaClient(config);
    const ssm = new SSMClient(config);
    const documents = DynamoDBDocumentClient.from(new DynamoDBClient(config));
    const control = new PipelineControl({
      lambda,
      ssm,
      stateParameterName: outputs.PipelineStateParameter,
      workerFunctionName: outputs.WorkerFunctionName,
      queueArn: outputs.QueueArn,
    });
    return {
      target,
      awsEnv,
      outputs,
      stackName,
      moto,
      deploy,
      runtime,
      captcha,
      site,
      apiKey,
      threads,
      reserve,
      timeScale,
      logDir,
      sqs,
      lambda,
      ssm,
      documents,
      control,
      stop: stopAll,
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}

// ---------------------------------------------------------------------------------------------
// Records

const SAMPLE_TYPES = [
  'recaptcha_v2',
  'recaptcha_v2_invisible',
  'recaptcha_v3',
  'recaptcha_enterprise',
  'turnstile',
];

/** One good job message for the target stand-in, cycling through the CAPTCHA types by `index`. */
export function goodRecord(targetUrl: string, sitekey: string, recordKey: string, index = 0): string {
  const url = `${targetUrl}/form/${recordKey}`;
  const base = { record_key: recordKey, sitekey, pageurl: url, submit_url: url };
  switch (SAMPLE_TYPES[index % SAMPLE_TYPES.length]) {
    case 'recaptcha_v2_invisible':
      return JSON.stringify({ ...base, captcha: { type: 'recaptcha_v2', invisible: true } });
    case 'recaptcha_v3':
      return JSON.stringify({ ...base, captcha: { type: 'recaptcha_v3', action: 'submit', min_score: 0.7 } });
    case 'recaptcha_enterprise':
      return JSON.stringify({ ...base, captcha: { type: 'recaptcha_enterprise', action: 'login' } });
    case 'turnstile':
      return JSON.stringify({
        ...base,
        captcha: { type: 'turnstile' },
        form: { email: `${recordKey}@example.test` },
      });
    default:
      // The seed article's flat form: reCAPTCHA v2.
      return JSON.stringify(base);
  }
}

/** `count` good records of mixed types. */
export function generatedRecords(
  targetUrl: string,
  sitekey: string,
  count: number,
  prefix: string,
): string[] {
  return Array.from({ length: count }, (_, i) =>
    goodRecord(targetUrl, sitekey, `${prefix}-${String(i + 1).padStart(5, '0')}`, i),
  );
}

/** The default sample: good records of every kind plus a few bad ones that must get clear reasons. */
export function sampleRecords(targetUrl: string, sitekey: string, prefix: string, good = 37): string[] {
  const records = generatedRecords(targetUrl, sitekey, good, prefix);
  const bad = [
    // Not JSON: no record key to file it under, so it goes to the DLQ with its reason.
    '{"record_key": "broken',
    // A record key but no sitekey: a `rejected` outcome naming the field.
    JSON.stringify({
      record_key: `${prefix}-bad-nositekey`,
      pageurl: `${targetUrl}/form/x`,
      submit_url: `${targetUrl}/form/x`,
    }),
    // A private address that is not allowlisted: refused before any solve.
    JSON.stringify({
      record_key: `${prefix}-bad-host`,
      sitekey,
      pageurl: 'http://10.0.0.1/form',
      submit_url: 'http://10.0.0.1/form',
    }),
  ];
  // Spread the bad ones through the run.
  records.splice(5, 0, bad[0]!);
  records.splice(20, 0, bad[1]!);
  records.splice(31, 0, bad[2]!);
  return records;
}

/** Lines of a JSONL file, verbatim (blank lines skipped): bad input must reach the worker. */
export function readRecordsFile(path: string): string[] {
  return readFileSync(path, 'utf8')
    .split('\n')
    .map((l) => l.replace(/\r$/, ''))
    .filter((l) => l.trim() !== '');
}

/** Record keys the worker can file an outcome under, and how many bodies have none. */
export function expectedOutcomes(bodies: string[]): { keys: Set<string>; unkeyed: number } {
  const keys = new Set<string>();
  let unkeyed = 0;
  for (const body of bodies) {
    let key: unknown;
    try {
      key = (JSON.parse(body) as { record_key?: unknown })?.record_key;
    } catch {
      key = undefined;
    }
    if (typeof key === 'string' && key.trim() !== '' && key.length <= 512) keys.add(key);
    else unkeyed++;
  }
  return { keys, unkeyed };
}

// ---------------------------------------------------------------------------------------------
// Queue, outcomes, DLQ

/**
 * Sends bodies in batches of 10, keeping at most `maxQueued` visible in the queue: moto's
 * SQS gets slower as a queue grows, and real producers stream too.
 */
export async function feedQueue(
  stack: Pick<LocalStack, 'sqs'>,
  queueUrl: string,
  bodies: string[],
  options: { maxQueued?: number; signal?: AbortSignal; onSent?: (sent: number) => void } = {},
): Promise<void> {
  const maxQueued = options.maxQueued ?? 50;
  let sent = 0;
  while (sent < bodies.length) {
    if (options.signal?.aborted) return;
    const depth = await queueDepth(stack, queueUrl);
    const room = Math.max(0, maxQueued - depth.visible);
    if (room === 0) {
      await new Promise((resolve) => setTimeout(resolve, 200));
      continue;
    }
    const end = Math.min(bodies.length, sent + room);
    for (let i = sent; i < end; i += 10) {
      const chunk = bodies.slice(i, Math.min(end, i + 10));
      const out = await stack.sqs.send(
        new SendMessageBatchCommand({
          QueueUrl: queueUrl,
          Entries: chunk.map((body, n) => ({ Id: String(n), MessageBody: body })),
        }),
      );
      if (out.Failed?.length) {
        throw new Error(
          `SendMessageBatch failed for ${out.Failed.length} messages: ${out.Failed[0]?.Message}`,
        );
      }
      sent += chunk.length;
      options.onSent?.(sent);
    }
  }
}

export async function queueDepth(
  stack: Pick<LocalStack, 'sqs'>,
  queueUrl: string,
): Promise<{ visible: number; inFlight: number }> {
  const out = await stack.sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: queueUrl,
      AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
    }),
  );
  return {
    visible: Number(out.Attributes?.ApproximateNumberOfMessages ?? 0),
    inFlight: Number(out.Attributes?.ApproximateNumberOfMessagesNotVisible ?? 0),
  };
}

/** Every outcome row (a Scan: the local tables are small). */
export async function readOutcomes(stack: Pick<LocalStack, 'documents' | 'outputs'>): Promise<OutcomeRow[]> {
  const rows: OutcomeRow[] = [];
  let start: Record<string, unknown> | undefined;
  do {
    const out = await stack.documents.send(
      new ScanCommand({ TableName: stack.outputs.TableName, ExclusiveStartKey: start }),
    );
    rows.push(...((out.Items ?? []) as OutcomeRow[]));
    start = out.LastEvaluatedKey;
  } while (start);
  return rows;
}

function attr(attrs: Record<string, MessageAttributeValue> | undefined, name: string): string | undefined {
  return attrs?.[name]?.StringValue;
}

/**
 * The DLQ's messages with their reason attributes. Reading receives them with a short
 * visibility timeout, so they are back in the DLQ (for a redrive) a moment later.
 */
export async function readDlq(
  stack: Pick<LocalStack, 'sqs' | 'outputs'>,
  visibilitySeconds = 2,
): Promise<DlqEntry[]> {
  const seen = new Map<string, DlqEntry>();
  for (let round = 0; round < 1000; round++) {
    const out = await stack.sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: stack.outputs.DlqUrl,
        MaxNumberOfMessages: 10,
        VisibilityTimeout: visibilitySeconds,
        MessageAttributeNames: ['All'],
      }),
    );
    const messages = out.Messages ?? [];
    if (messages.length === 0) break;
    for (const m of messages) {
      seen.set(m.MessageId ?? '', {
        messageId: m.MessageId ?? '',
        body: m.Body ?? '',
        recordKey: attr(m.MessageAttributes, 'record_key'),
        errorCode: attr(m.MessageAttributes, 'error_code'),
        reason: attr(m.MessageAttributes, 'reason'),
      });
    }
  }
  return [...seen.values()];
}

// ---------------------------------------------------------------------------------------------
// A run: feed records, watch progress, summarize

export interface RunProgress {
  total: number;
  done: number;
  sent: number;
  inFlight: number;
  cap: number;
  planThreads: number;
  outcomes: Record<string, number>;
  dlq: number;
  elapsedS: number;
  paused: PipelineState | undefined;
}

export interface RunSummary {
  records: number;
  outcomes: Record<string, number>;
  dlq: number;
  captcha_submits: number;
  max_in_flight: number;
  cap: number;
  plan_threads: number;
  elapsed_s: number;
  zero_balance: number;
  invocations: number;
  paused: PipelineState | undefined;
  complete: boolean;
  dlq_reasons: Record<string, number>;
  deploy_s: number | undefined;
  log_dir: string;
}

/** The cap the pipeline runs at now: the poller's limit locally, else min(reserved, mapping maximum). */
export async function currentCap(stack: LocalStack): Promise<number> {
  const mapping = stack.runtime?.stats().mappings.find((m) => m.uuid === stack.outputs.MappingUuid);
  if (mapping) return mapping.enabled ? mapping.limit : 0;
  const m = await stack.control.readMapping();
  return m.enabled ? (m.maximumConcurrency ?? 0) : 0;
}

/** Counts toward "done": final outcome rows of the run's keys, plus DLQ messages. */
export async function progressOf(
  stack: LocalStack,
  expected: { keys: Set<string>; unkeyed: number },
  startedAt: number,
  sent: number,
): Promise<RunProgress> {
  const [rows, dlq, state, cap] = await Promise.all([
    readOutcomes(stack),
    queueDepth(stack, stack.outputs.DlqUrl),
    stack.control.readState(),
    currentCap(stack),
  ]);
  const outcomes: Record<string, number> = {};
  let final = 0;
  for (const row of rows) {
    if (!expected.keys.has(row.record_key)) continue;
    outcomes[row.status] = (outcomes[row.status] ?? 0) + 1;
    if ((FINAL_STATUSES as readonly string[]).includes(row.status)) final++;
  }
  const standin = stack.captcha.stats();
  const dlqCount = dlq.visible + dlq.inFlight;
  return {
    total: expected.keys.size + expected.unkeyed,
    done: Math.min(expected.keys.size + expected.unkeyed, final + dlqCount),
    sent,
    inFlight: standin.inFlight,
    cap,
    planThreads: standin.threads,
    outcomes,
    dlq: dlqCount,
    elapsedS: (Date.now() - startedAt) / 1000,
    paused: state.paused ? state : undefined,
  };
}

export interface RunOptions {
  /** Called about every `intervalMs` with fresh counts. */
  onProgress?: (p: RunProgress) => void;
  intervalMs?: number;
  /** Give up after this long (the summary says complete: false). @default 600000 */
  timeoutMs?: number;
  /** Stop waiting as soon as the pipeline is paused. @default true */
  stopWhenPaused?: boolean;
  signal?: AbortSignal;
  maxQueued?: number;
}

/** Feeds the bodies, waits until each has an outcome or a DLQ entry (or a pause, a timeout), summarizes. */
export async function runRecords(
  stack: LocalStack,
  bodies: string[],
  options: RunOptions = {},
): Promise<RunSummary> {
  const startedAt = Date.now();
  const expected = expectedOutcomes(bodies);
  let sent = 0;
  const feeding = feedQueue(stack, stack.outputs.QueueUrl, bodies, {
    maxQueued: options.maxQueued,
    signal: options.signal,
    onSent: (n) => {
      sent = n;
    },
  });
  let feedError: unknown;
  feeding.catch((err) => {
    feedError = err;
  });
  const timeoutMs = options.timeoutMs ?? 600_000;
  let last: RunProgress;
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, options.intervalMs ?? 500));
    if (feedError) throw feedError;
    last = await progressOf(stack, expected, startedAt, sent);
    options.onProgress?.(last);
    if (last.done >= last.total && sent === bodies.length) break;
    if (last.paused && options.stopWhenPaused !== false) break;
    if (options.signal?.aborted || Date.now() - startedAt > timeoutMs) break;
  }
  return summarize(stack, last, startedAt);
}

export async function summarize(
  stack: LocalStack,
  last: RunProgress,
  startedAt: number,
): Promise<RunSummary> {
  const standin = stack.captcha.stats();
  const dlqReasons: Record<string, number> = {};
  if (last.dlq > 0) {
    for (const entry of await readDlq(stack, 1)) {
      const reason = entry.errorCode ?? entry.reason ?? 'unknown';
      dlqReasons[reason] = (dlqReasons[reason] ?? 0) + 1;
    }
  }
  const worker = stack.runtime?.stats().functions[stack.outputs.WorkerFunctionName];
  return {
    records: last.total,
    outcomes: last.outcomes,
    dlq: last.dlq,
    captcha_submits: standin.submits,
    max_in_flight: standin.maxInFlight,
    cap: last.cap,
    plan_threads: standin.threads,
    elapsed_s: Math.round((Date.now() - startedAt) / 100) / 10,
    zero_balance: standin.zeroBalance,
    invocations: worker?.invocations ?? 0,
    paused: last.paused,
    complete: last.done >= last.total,
    dlq_reasons: dlqReasons,
    deploy_s: stack.deploy ? Math.round(stack.deploy.timings.totalMs / 100) / 10 : undefined,
    log_dir: stack.logDir,
  };
}
