import { join } from 'node:path';
import {
  EventBridgeClient,
  ListRulesCommand,
  ListTargetsByRuleCommand,
  type Rule,
  type Target,
} from '@aws-sdk/client-eventbridge';
import {
  type EventSourceMappingConfiguration,
  GetEventSourceMappingCommand,
  LambdaClient,
  paginateListEventSourceMappings,
} from '@aws-sdk/client-lambda';
import { S3Client } from '@aws-sdk/client-s3';
import { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { SQSClient } from '@aws-sdk/client-sqs';
import { capInForce } from '../../functions/pipeline/cap-policy.js';
import { RUNTIME_USER_AGENT } from '../emulator/usage.js';
import { type AlarmChange, AlarmEvaluator } from './cloudwatch/alarms.js';
import { EmulatorCloudWatch } from './cloudwatch/client.js';
import { LambdaMetrics } from './cloudwatch/metrics.js';
import { CodeCache } from './code-cache.js';
import { FunctionHost } from './function-host.js';
import { LogSink, Redactions, secretNamesIn } from './log-sink.js';
import { SqsPoller } from './pollers/sqs.js';
import { StreamPoller } from './pollers/stream.js';
import { RuleTimer } from './rule-timer.js';
import {
  type ClientConfig,
  errorMessage,
  type FunctionStats,
  type LocalRuntimeOptions,
  type RuntimeContext,
  type RuntimeEvent,
  type RuntimeStats,
} from './types.js';

export type { AlarmChange } from './cloudwatch/alarms.js';
export { succeededMessageIds, toSqsRecord } from './pollers/sqs-event.js';
export { ratePeriodMs } from './rule-timer.js';
export type {
  FunctionStats,
  LocalRuntimeOptions,
  MappingStats,
  RuntimeEvent,
  RuntimeStats,
  StreamMappingStats,
} from './types.js';

/**
 * threadgate's local Lambda runtime for moto, which stores functions, mappings and rules but
 * runs none of them. It reads the deployed configuration back from the emulator and behaves
 * like Lambda's SQS poller and EventBridge's scheduler:
 *
 * - each SQS event source mapping is polled with concurrency = the cap in force
 *   (functions/pipeline/cap-policy.ts capInForce), reported by the moto launcher's wake wait as it
 *   changes (runtime/pollers/queue-watch.ts) or re-read every `refreshMs`, so the cap adjuster's
 *   changes take effect and a disabled mapping stops polling (invocations already running
 *   finish);
 * - each invocation runs the bundle CDK built (downloaded from the emulator's S3, where
 *   `cdk deploy` put it) in a worker thread with the function's environment, Lambda's SQS
 *   event and context shapes, the function timeout (the thread is terminated) and partial
 *   batch responses (only the successful messages are deleted); redelivery is left to the
 *   queue's visibility timeout and redrive policy;
 * - scheduled rules (`rate(...)`) fire their Lambda targets at rate × `timeScale`;
 * - Lambda's metrics of each function go to the emulator's CloudWatch, and its metric alarms are
 *   evaluated every ALARM_EVALUATION_MS (cloudwatch/: moto evaluates none).
 *
 * Function output goes to `<logDir>/<function>.log`, never to the console.
 *
 * One class per file under local/runtime/: SqsPoller (the mapping's poller), RuleTimer (the
 * scheduler), FunctionHost (a function's configuration and environments), ExecutionEnvironment
 * (one worker thread), CodeCache (the unzipped bundles), LogSink (redacted log files),
 * LambdaMetrics and AlarmEvaluator (CloudWatch). This file is the only one that imports them;
 * each gets a RuntimeContext (types.ts) and callbacks.
 */

const DEFAULT_REFRESH_MS = 500;
/** With every queue mapping watched, the full re-read runs every this many refresh periods. */
const WATCHED_REFRESH_FACTOR = 10;
/**
 * How often the alarms are evaluated: wall-clock, once a minute as CloudWatch evaluates alarms on
 * one-minute periods (not scaled by `timeScale`). Each evaluation reads every alarm and its metric
 * from the emulator; every 10 s that was moto CPU for each stack the suite keeps alive, idle or
 * not. A test that needs the alarms now calls `evaluateAlarms()`.
 */
const ALARM_EVALUATION_MS = 60_000;

export class LocalRuntime implements RuntimeContext {
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
  /** What every log file of this runtime redacts: `redact`, plus each value of the functions' secrets. */
  readonly redactions: Redactions;
  private readonly secrets: SecretsManagerClient;
  /** Endpoint, region and credentials of the emulator, for clients the pollers make. */
  readonly clientConfig: ClientConfig;
  stopped = false;
  /** Lambda's metrics of the functions, published to the emulator's CloudWatch. */
  readonly metrics: LambdaMetrics;
  private readonly alarms: AlarmEvaluator;
  private alarmTimer: NodeJS.Timeout | undefined;
  private evaluation: Promise<unknown> = Promise.resolve();
  private readonly hosts = new Map<string, FunctionHost>();
  private readonly pollers = new Map<string, SqsPoller>();
  private readonly streamPollers = new Map<string, StreamPoller>();
  private readonly rules = new Map<string, RuleTimer>();
  private readonly code: CodeCache;
  private refreshTimer: NodeJS.Timeout | undefined;
  private refreshing: Promise<void> | undefined;
  private ticksSinceFull = 0;

  private constructor(readonly options: LocalRuntimeOptions) {
    const env = options.awsEnv;
    this.region = env.AWS_REGION ?? env.AWS_DEFAULT_REGION ?? 'us-east-1';
    const clientConfig = {
      endpoint: env.AWS_ENDPOINT_URL as string | undefined,
      region: this.region,
      credentials: {
        accessKeyId: env.AWS_ACCESS_KEY_ID ?? 'testing',
        secretAccessKey: env.AWS_SECRET_ACCESS_KEY ?? 'testing',
      },
      customUserAgent: RUNTIME_USER_AGENT,
    };
    this.clientConfig = clientConfig;
    this.lambda = new LambdaClient(clientConfig);
    this.sqs = new SQSClient(clientConfig);
    this.s3 = new S3Client({ ...clientConfig, forcePathStyle: true });
    this.events = new EventBridgeClient(clientConfig);
    this.timeScale = options.timeScale ?? 1;
    this.refreshMs = options.refreshMs ?? DEFAULT_REFRESH_MS;
    this.unreservedLimit = options.unreservedLimit ?? 10;
    this.receiveWaitSeconds = options.receiveWaitSeconds ?? 0;
    this.stateMaxAgeMs = options.stateMaxAgeMs ?? 100;
    this.secrets = new SecretsManagerClient(clientConfig);
    this.redactions = new Redactions(options.redact);
    this.runtimeLog = new LogSink(join(options.logDir, 'runtime.log'), this.redactions);
    const cloudwatch = new EmulatorCloudWatch(clientConfig);
    const log = (line: string) => this.runtimeLog.line(line);
    this.metrics = new LambdaMetrics(cloudwatch, log);
    this.alarms = new AlarmEvaluator(cloudwatch, log);
    this.code = new CodeCache({
      s3: this.s3,
      cacheRoot: options.codeCacheDir ?? join(options.logDir, 'code'),
      overrides: options.codeDirs,
    });
  }

  /** Reads the deployed configuration, loads the functions' code and starts polling and scheduling. */
  static async start(options: LocalRuntimeOptions): Promise<LocalRuntime> {
    const runtime = new LocalRuntime(options);
    await runtime.refresh(options.prewarm ?? false);
    runtime.scheduleRefresh();
    runtime.alarmTimer = setInterval(() => {
      runtime.evaluateAlarms().catch((err) => {
        if (!runtime.stopped) runtime.emit({ type: 'error', where: 'alarms', message: errorMessage(err) });
      });
    }, ALARM_EVALUATION_MS);
    return runtime;
  }

  /**
   * Publishes the Lambda metrics counted so far, then evaluates every metric alarm once
   * (cloudwatch/alarms.ts); runs every ALARM_EVALUATION_MS, and a test calls it to see the
   * alarms now. One evaluation at a time. Returns the state changes it made.
   */
  evaluateAlarms(): Promise<AlarmChange[]> {
    const run = this.evaluation.then(async () => {
      await this.metrics.flush();
      return this.alarms.evaluate();
    });
    this.evaluation = run.catch(() => undefined);
    return run;
  }

  /**
   * Kills execution environments from outside, as Lambda's platform does on an out-of-memory
   * kill or a crash: of `functionName` (every function when undefined), only busy ones
   * (`busy: true`: each invocation fails with Runtime.ExitError and counts as an Error) or only
   * idle ones (`busy: false`), at most `max`. Returns how many it killed.
   */
  async killEnvironments(
    functionName: string | undefined,
    which: { busy?: boolean; max?: number } = {},
  ): Promise<number> {
    let left = which.max ?? Number.POSITIVE_INFINITY;
    let killed = 0;
    for (const [name, host] of this.hosts) {
      if (left <= 0) break;
      if (functionName !== undefined && name !== functionName) continue;
      const n = await host.kill({ busy: which.busy, max: left });
      killed += n;
      left -= n;
    }
    return killed;
  }

  emit(event: RuntimeEvent): void {
    if (event.type === 'error') this.runtimeLog.line(`error in ${event.where}: ${event.message}`);
    this.options.onEvent?.(event);
  }

  private wanted(functionName: string): boolean {
    return !this.options.functionNames || this.options.functionNames.includes(functionName);
  }

  private ensureHost(functionName: string): FunctionHost {
    let host = this.hosts.get(functionName);
    if (!host) {
      // The function's unzipped code: an override, else the zip `cdk deploy` uploaded to the emulator's S3.
      host = new FunctionHost(functionName, this, (sha, location) =>
        this.code.dirFor(functionName, sha, location),
      );
      this.hosts.set(functionName, host);
    }
    return host;
  }

  private scheduleRefresh(): void {
    if (this.stopped) return;
    this.refreshTimer = setTimeout(async () => {
      try {
        // While every queue mapping is watched (its settings and its function's reserved
        // concurrency arrive within ~100 ms), the full re-read only picks up new mappings,
        // rules and code or environment changes: every WATCHED_REFRESH_FACTOR ticks, so the
        // runtime's own calls do not compete with the functions' for the emulator.
        const pollers = [...this.pollers.values()];
        const watched = pollers.length > 0 && pollers.every((p) => p.watched);
        if (!watched || ++this.ticksSinceFull >= WATCHED_REFRESH_FACTOR) await this.refresh();
      } catch (err) {
        if (!this.stopped) this.emit({ type: 'error', where: 'refresh', message: errorMessage(err) });
      }
      this.scheduleRefresh();
    }, this.refreshMs);
  }

  /** Re-reads mappings, functions and rules now (also runs every `refreshMs`). */
  refresh(prewarm = false): Promise<void> {
    this.ticksSinceFull = 0;
    this.refreshing ??= this.doRefresh(prewarm).finally(() => {
      this.refreshing = undefined;
    });
    return this.refreshing;
  }

  private async doRefresh(prewarm = false): Promise<void> {
    const mappings: EventSourceMappingConfiguration[] = [];
    for await (const page of paginateListEventSourceMappings({ client: this.lambda }, {})) {
      mappings.push(...(page.EventSourceMappings ?? []));
    }
    const sqsMappings = mappings.filter(
      (m) => m.EventSourceArn?.startsWith('arn:aws:sqs:') && this.wanted(m.FunctionArn?.split(':')[6] ?? ''),
    );
    // DynamoDB stream mappings (the outcome publisher): the emulator runs none of them either.
    const streamMappings = mappings.filter(
      (m) =>
        m.EventSourceArn?.startsWith('arn:aws:dynamodb:') &&
        m.EventSourceArn.includes('/stream/') &&
        this.wanted(m.FunctionArn?.split(':')[6] ?? ''),
    );

    const rules: { rule: Rule; targets: Target[] }[] = [];
    // The SDK has no paginator for EventBridge ListRules, hence the NextToken loop.
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

    for (const m of [...sqsMappings, ...streamMappings]) this.ensureHost(m.FunctionArn?.split(':')[6] ?? '');
    for (const { targets } of rules) for (const t of targets) this.ensureHost(t.Arn?.split(':')[6] ?? '');
    await Promise.all([...this.hosts.values()].map((h) => h.refresh()));
    // Before any environment starts: a key rotated in since the last refresh is redacted too.
    await this.redactions.learnSecrets(
      this.secrets,
      [...this.hosts.values()].flatMap((h) => secretNamesIn(h.fn?.env ?? {})),
    );

    if (prewarm) {
      // Init every environment the pollers may use (and one per scheduled target) before polling starts.
      const wanted = new Map<FunctionHost, number>();
      for (const m of sqsMappings) {
        const host = this.ensureHost(m.FunctionArn?.split(':')[6] ?? '');
        const mapping = await this.lambda.send(new GetEventSourceMappingCommand({ UUID: m.UUID }));
        // As many as the poller will run once the mapping is enabled.
        const limit =
          capInForce({
            reservedConcurrency: host.stats.reservedConcurrency,
            mappingMaximum: mapping.ScalingConfig?.MaximumConcurrency,
          }) ?? this.unreservedLimit;
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
    for (const m of streamMappings) {
      const uuid = m.UUID ?? '';
      let poller = this.streamPollers.get(uuid);
      if (!poller) {
        poller = new StreamPoller(this, this.ensureHost(m.FunctionArn?.split(':')[6] ?? ''), m);
        this.streamPollers.set(uuid, poller);
      }
      await poller.refresh();
    }
    for (const { rule, targets } of rules) {
      const name = rule.Name ?? '';
      let timer = this.rules.get(name);
      if (!timer) {
        timer = new RuleTimer(
          this,
          (fn) => this.hosts.get(fn),
          name,
          rule.Arn ?? '',
          rule.ScheduleExpression ?? '',
        );
        this.rules.set(name, timer);
      }
      timer.update(rule, targets);
    }
  }

  stats(): RuntimeStats {
    const functions: Record<string, FunctionStats> = {};
    for (const [name, host] of this.hosts) functions[name] = structuredClone(host.stats);
    return {
      functions,
      mappings: [...this.pollers.values()].map((p) => ({ ...p.stats })),
      streams: [...this.streamPollers.values()].map((p) => ({ ...p.stats })),
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
    clearInterval(this.alarmTimer);
    for (const r of this.rules.values()) r.stop();
    await this.refreshing?.catch(() => undefined);
    await Promise.all([...this.hosts.values()].map((h) => h.stop()));
    await Promise.all([...this.pollers.values(), ...this.streamPollers.values()].map((p) => p.stop()));
    // The invocations cut off above count too: the last metrics go out before the log closes.
    await this.evaluation;
    await this.metrics.stop();
    await this.runtimeLog.close();
  }
}
