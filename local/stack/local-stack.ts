import { randomBytes } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { GetFunctionConfigurationCommand, LambdaClient } from '@aws-sdk/client-lambda';
import { SQSClient } from '@aws-sdk/client-sqs';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { DEFAULT_TIMINGS } from '../../functions/captchaai/timings.js';
import { ConfigError } from '../../functions/common/errors.js';
import { DEFAULTS } from '../../functions/common/settings.js';
import { capCeiling, computeCap } from '../../functions/pipeline/cap-policy.js';
import { PipelineControl } from '../../functions/pipeline/control.js';
import { readLaneSettings } from '../../functions/pipeline/lanes.js';
import { resolveConfig, type ThreadgateSettings } from '../../infra/config.js';
import {
  clientConfig,
  type DeployResult,
  deployToEmulator,
  REPO_ROOT,
  type StackOutputs,
  type StackSettings,
} from '../emulator/deploy.js';
import { type MotoServer, startMoto } from '../emulator/moto.js';
import { checkLocalStack } from '../localstack/health.js';
import { deployToLocalStack, localStackSettings, localStackTargetConfig } from '../localstack/target.js';
import { LocalRuntime, type LocalRuntimeOptions, type RuntimeEvent } from '../runtime/local-runtime.js';
import { type CaptchaStandin, type FaultRates, startCaptchaStandin } from '../standins/captchaai/standin.js';
import { startTargetStandin, type TargetStandin } from '../standins/target.js';
import { type ExternalCaptchaai, planThreadsOf } from './captchaai.js';
import { newRunDir } from './run-dirs.js';

/**
 * The embedded local stack: moto (AWS), the CaptchaAI stand-in and the target-site stand-in,
 * the real CDK app deployed to moto, and the local runtime running its functions. `threadgate
 * local` and the end-to-end tests both build on this.
 *
 * With `target: 'localstack'` the same CDK app is deployed to a running LocalStack after its
 * health/version check (local/localstack/target.ts; docs/local-stack.md "LocalStack"), LocalStack
 * runs the functions, and the stand-ins listen on fixed ports of all interfaces, where the
 * functions' containers reach them through the Docker host.
 *
 * This file starts the stack. Beside it: records.ts (the job messages a run sends),
 * observation.ts (reading queues, outcomes, the DLQ and the cap back) and
 * run.ts (feeding a run, its progress, "every record finished", the summary).
 */
export interface LocalStackOptions {
  /** Plan threads of the CaptchaAI stand-in. @default 8 (with `captchaai`: the server's threadsinfo) */
  threads?: number;
  /**
   * A CaptchaAI-compatible server (and its key) to use instead of starting the stand-in
   * (local/stack/captchaai.ts validates it). The plan's threads come from its threadsinfo;
   * the target stand-in verifies tokens with its `POST /verify` when it is loopback (another
   * stand-in has one). Not with the LocalStack target.
   */
  captchaai?: ExternalCaptchaai;
  /** Plan threads kept free (the cap is threads − reserve). @default 2 */
  reserve?: number;
  /** Multiplies CaptchaAI latencies, the client's waits and the one-minute rule. @default 0.01 */
  timeScale?: number;
  /** Stand-in faults from the start. */
  faults?: Partial<FaultRates>;
  /** The stand-in's random source for solve latencies and faults (a seeded one makes a run repeatable). @default Math.random */
  random?: () => number;
  /** The target stand-in's page-load and POST delays at time scale 1 (scaled like CaptchaAI's waits). @default 0 */
  targetDelays?: { pageMs?: number; postMs?: number };
  /** Extra infra/config.ts settings (they join the synth cache key). */
  settings?: StackSettings;
  /** Logs go here. @default <repo>/.local-stack/runs/<time>-<random> */
  logDir?: string;
  /** Synthesize even when a cached assembly exists. */
  freshSynth?: boolean;
  /** `moto` (default): everything here. `localstack`: deploy to a running LocalStack, which runs the functions. */
  target?: 'moto' | 'localstack';
  /** Phase messages ("deploying …") for a progress display. */
  onPhase?: (message: string) => void;
  onRuntimeEvent?: (event: RuntimeEvent) => void;
  /** Start the local runtime in this process (moto only). false: the caller runs one, e.g. local/runtime/child-process.ts. @default true */
  runtime?: boolean;
}

/**
 * A running local stack. `captcha` is the CaptchaAI stand-in it started, or undefined when it
 * uses an external server (`captchaai` option): AnyLocalStack. Stacks started without that
 * option always have their stand-in.
 */
export interface LocalStack<Standin extends CaptchaStandin | undefined = CaptchaStandin> {
  target: 'moto' | 'localstack';
  awsEnv: Record<string, string>;
  outputs: StackOutputs;
  stackName: string;
  /** The emulator and the runtime only for moto; deploy timings for both targets. */
  moto: MotoServer | undefined;
  deploy: DeployResult | undefined;
  runtime: LocalRuntime | undefined;
  captcha: Standin;
  /** CaptchaAI's base URL as the functions use it: the stand-in's or the external server's. */
  captchaaiUrl: string;
  /** The target-site stand-in (forms at /form/<record key>). */
  site: TargetStandin;
  apiKey: string;
  threads: number;
  reserve: number;
  timeScale: number;
  logDir: string;
  sqs: SQSClient;
  lambda: LambdaClient;
  documents: DynamoDBDocumentClient;
  /** The pipeline's pause, resume and state; with lanes, the lane shape too (the worker's LANES). */
  control: PipelineControl;
  stop(): Promise<void>;
}

/** A local stack with its own CaptchaAI stand-in or with an external server. */
export type AnyLocalStack = LocalStack<CaptchaStandin | undefined>;

/**
 * Local visibility timeout beyond the lease: the claim is made a moment after the receive (the
 * invocation's start, a cold environment's set-up), so the message must not return before it ends.
 */
export const LEASE_MARGIN_SECONDS = 5;

/** The worker's cool-down on the local stack (ms, scaled): the stack default × the time scale. */
export function localCooldownMs(timeScale: number): number {
  return Math.round(DEFAULTS.cooldownMs * timeScale);
}

/**
 * How long after its in.php the local CaptchaAI stand-in keeps a task that never finishes (ms at
 * time scale 1): until the worker's deadline plus its cool-down say the task must be done. The
 * stand-in's own default (ABANDON_AFTER_MS, 300 s) is longer than the stack default's 120 s +
 * 60 s; with it, a slot kept for the cool-down took its next task beside the abandoned one (cap
 * + 1, found by the chaos run), and a cool-down long enough for it (180 s) would put the worst
 * case at time scale 1 beyond Lambda's 900 s. CaptchaAI publishes no such figure: on AWS
 * `cooldownMs` is the operator's reading of how long their provider keeps such a task
 * (docs/configuration.md).
 */
export const LOCAL_ABANDON_AFTER_MS = DEFAULT_TIMINGS.deadlineMs + DEFAULTS.cooldownMs;

/** The stack settings the local stack deploys with (stand-in URL and the time-scaled waits). */
export function localSettings(o: {
  threads: number;
  reserve: number;
  timeScale: number;
  captchaaiUrl: string;
  allowedHosts?: string[];
  extra?: StackSettings;
}): StackSettings {
  const settings: StackSettings = {
    stackName: DEFAULTS.stackName,
    timeScale: o.timeScale,
    reserve: o.reserve,
    // The adjuster sets the cap from threadsinfo on its first tick; start where it will land.
    initialCap: computeCap(o.threads, {
      reserve: o.reserve,
      minCap: DEFAULTS.minCap,
      maxCap: capCeiling(Number(o.extra?.lanes ?? 1)),
    }),
    allowedHosts: o.allowedHosts ?? ['127.0.0.1', 'localhost'],
    captchaaiUrl: o.captchaaiUrl,
    // Loopback targets answer at once.
    targetTimeoutMs: 5000,
    cooldownMs: localCooldownMs(o.timeScale),
    ...o.extra,
  };
  // A runtime killed on purpose (the crash and chaos runs) leaves its messages invisible for the
  // visibility timeout. Here (not AWS's 6 × the timeout: nothing throttles locally) they come back
  // LEASE_MARGIN_SECONDS after the lease, which outlasts the worker timeout: the returning message
  // finds its killed claim expired and is worked at once, instead of waiting out a longer timeout.
  if (settings.visibilityTimeoutSeconds === undefined) {
    const { leaseSeconds } = resolveConfig(settings as ThreadgateSettings);
    settings.visibilityTimeoutSeconds = leaseSeconds + LEASE_MARGIN_SECONDS;
  }
  return settings;
}

/**
 * The local stack's scheduled rules fire no more often than this (ms). At time scale 0.01 the
 * adjuster's one-minute rule would run every 600 ms, and those runs were more than half of an
 * idle stack's CPU (measured: node 4.5 and moto 2.0 s a minute, against 1.5 and 1.3 with the rule
 * off), with a test suite running ten-odd stacks side by side; each run costs about 60 ms of CPU
 * (the invocation, its four AWS calls and threadsinfo). Every 5 s, a plan change reaches the cap
 * within about 5 s; at time scales of 1/12 and above the floor does not apply, and at time
 * scale 1 the rule runs every minute as on AWS.
 */
export const LOCAL_MIN_RULE_PERIOD_MS = 5_000;

/** How the local stack runs its local runtime (in this process, or in a child: local/runtime/child-process.ts). */
export function localRuntimeOptions(o: {
  awsEnv: Record<string, string>;
  logDir: string;
  timeScale: number;
  apiKey: string;
}): LocalRuntimeOptions {
  return {
    awsEnv: o.awsEnv,
    logDir: o.logDir,
    timeScale: o.timeScale,
    minRulePeriodMs: LOCAL_MIN_RULE_PERIOD_MS,
    redact: [o.apiKey],
    codeCacheDir: join(REPO_ROOT, '.local-stack', 'code'),
    prewarm: true,
  };
}

/** What the steps of startLocalStack share: the options, the phase reporter and the cleanups so far. */
interface StartContext {
  options: LocalStackOptions;
  reserve: number;
  timeScale: number;
  logDir: string;
  phase: (message: string) => void;
  /** Undone in reverse order by the stack's stop (or when a later step fails). */
  cleanups: (() => Promise<unknown>)[];
  /** The LocalStack target's settings; undefined on moto. */
  lsConfig: ReturnType<typeof localStackTargetConfig> | undefined;
  /** Whether the stand-ins listen on every interface (LocalStack's containers reach them there). */
  local: boolean;
}

export function startLocalStack(options?: LocalStackOptions & { captchaai?: undefined }): Promise<LocalStack>;
export function startLocalStack(options: LocalStackOptions): Promise<AnyLocalStack>;
export async function startLocalStack(options: LocalStackOptions = {}): Promise<AnyLocalStack> {
  const target =
    options.target ?? (process.env.THREADGATE_E2E_TARGET === 'localstack' ? 'localstack' : 'moto');
  if (options.captchaai && target === 'localstack') {
    throw new ConfigError(
      'captchaai',
      "an external CaptchaAI server is not supported with the LocalStack target (LocalStack's containers reach only the stand-ins' fixed ports)",
    );
  }
  const logDir = options.logDir ?? newRunDir(join(REPO_ROOT, '.local-stack', 'runs'));
  mkdirSync(logDir, { recursive: true });
  const cleanups: (() => Promise<unknown>)[] = [];
  const stopAll = async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
  };
  const local = target === 'localstack';
  const ctx: StartContext = {
    options,
    reserve: options.reserve ?? 2,
    timeScale: options.timeScale ?? 0.01,
    logDir,
    phase: options.onPhase ?? (() => undefined),
    cleanups,
    lsConfig: undefined,
    local,
  };
  try {
    // LocalStack runs the functions in containers: they reach the stand-ins on fixed ports of the
    // host. Check that it is there (and the right version) before binding them.
    ctx.lsConfig = local ? localStackTargetConfig() : undefined;
    if (ctx.lsConfig) {
      ctx.phase(`checking LocalStack at ${ctx.lsConfig.awsEnv.AWS_ENDPOINT_URL}`);
      await checkLocalStack(ctx.lsConfig.awsEnv.AWS_ENDPOINT_URL ?? '');
    }
    const captchaai = await startCaptchaai(ctx);
    const site = await startSite(ctx, captchaai.captchaaiUrl);
    const { moto, deploy, awsEnv } = await deployStack(ctx, captchaai);
    const runAssembly = deploy.assemblyDir;
    cleanups.push(async () => rmSync(runAssembly, { recursive: true, force: true }));
    const runtime =
      moto && options.runtime !== false ? await startRuntime(ctx, awsEnv, captchaai.apiKey) : undefined;
    return {
      target,
      awsEnv,
      outputs: deploy.outputs,
      stackName: deploy.stackName,
      moto,
      deploy,
      runtime,
      ...captchaai,
      site,
      reserve: ctx.reserve,
      timeScale: ctx.timeScale,
      logDir,
      ...(await stackClients(awsEnv, deploy.outputs)),
      stop: stopAll,
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}

interface Captchaai {
  threads: number;
  /** The stand-in; undefined with an external server. */
  captcha: CaptchaStandin | undefined;
  apiKey: string;
  captchaaiUrl: string;
}

/** The CaptchaAI side: the external server's plan, or a stand-in started for this stack. */
async function startCaptchaai(ctx: StartContext): Promise<Captchaai> {
  const { options, lsConfig, phase } = ctx;
  const external = options.captchaai;
  if (external) {
    phase(`asking ${external.url} for its plan (threadsinfo)`);
    const threads = options.threads ?? (await planThreadsOf(external));
    return { threads, captcha: undefined, apiKey: external.apiKey, captchaaiUrl: external.url };
  }
  const threads = options.threads ?? 8;
  const apiKey = lsConfig ? lsConfig.apiKey : randomBytes(16).toString('hex');
  phase('starting the CaptchaAI stand-in');
  const standin = await startCaptchaStandin({
    threads,
    apiKey,
    timeScale: ctx.timeScale,
    abandonAfterMs: LOCAL_ABANDON_AFTER_MS,
    faults: options.faults,
    ...(options.random ? { random: options.random } : {}),
    port: lsConfig?.captchaPort ?? 0,
    host: ctx.local ? '0.0.0.0' : '127.0.0.1',
  });
  ctx.cleanups.push(() => standin.close());
  return { threads, captcha: standin, apiKey, captchaaiUrl: standin.url };
}

/** The target-site stand-in, named as the functions see it. */
async function startSite(ctx: StartContext, captchaaiUrl: string): Promise<TargetStandin> {
  const { options, lsConfig, timeScale } = ctx;
  const external = options.captchaai;
  const targetSite = await startTargetStandin({
    // Tokens are checked where they were issued; a remote service's tokens cannot be (and the
    // target stand-in sends nothing off this machine), so its POSTs answer VERIFY_UNAVAILABLE.
    captchaUrl: external && !external.loopback ? undefined : captchaaiUrl,
    pageDelayMs: (options.targetDelays?.pageMs ?? 0) * timeScale,
    postDelayMs: (options.targetDelays?.postMs ?? 0) * timeScale,
    port: lsConfig?.targetPort ?? 0,
    host: ctx.local ? '0.0.0.0' : '127.0.0.1',
  });
  ctx.cleanups.push(() => targetSite.close());
  // Records must name the target as the functions see it: from LocalStack's Lambda containers
  // that is the Docker host (THREADGATE_STANDIN_HOST, default host.docker.internal).
  return lsConfig ? { ...targetSite, url: `http://${lsConfig.standinHost}:${targetSite.port}` } : targetSite;
}

/** The CDK app deployed to LocalStack, or to a moto started for this stack. */
async function deployStack(
  ctx: StartContext,
  c: Captchaai,
): Promise<{ moto: MotoServer | undefined; deploy: DeployResult; awsEnv: Record<string, string> }> {
  const { options, lsConfig, phase, reserve, timeScale } = ctx;
  const { threads } = c;
  if (lsConfig) {
    const deployed = await deployToLocalStack({
      config: lsConfig,
      settings: localSettings({
        threads,
        reserve,
        timeScale,
        ...localStackSettings(lsConfig),
        extra: { ...options.settings, ...(lsConfig.stackName ? { stackName: lsConfig.stackName } : {}) },
      }),
      logFile: join(ctx.logDir, 'deploy.log'),
      freshSynth: options.freshSynth,
      onPhase: phase,
    });
    return { moto: undefined, deploy: deployed.deploy, awsEnv: lsConfig.awsEnv };
  }
  phase('starting moto');
  const moto = await startMoto();
  ctx.cleanups.push(() => moto?.stop() ?? Promise.resolve());
  const awsEnv = moto.awsEnv;
  phase('deploying the CDK app to moto (synth is cached between runs)');
  const deploy = await deployToEmulator({
    awsEnv,
    apiKey: c.apiKey,
    settings: localSettings({
      threads,
      reserve,
      timeScale,
      captchaaiUrl: c.captchaaiUrl,
      extra: options.settings,
    }),
    logFile: join(ctx.logDir, 'deploy.log'),
    freshSynth: options.freshSynth,
  });
  return { moto, deploy, awsEnv };
}

async function startRuntime(
  ctx: StartContext,
  awsEnv: Record<string, string>,
  apiKey: string,
): Promise<LocalRuntime> {
  ctx.phase('starting the local runtime');
  const runtime = await LocalRuntime.start({
    ...localRuntimeOptions({ awsEnv, logDir: ctx.logDir, timeScale: ctx.timeScale, apiKey }),
    onEvent: ctx.options.onRuntimeEvent,
  });
  // Stop the runtime before moto: its pollers would otherwise fail against a dead endpoint.
  ctx.cleanups.push(() => runtime.stop());
  return runtime;
}

/** The SDK clients and the pipeline control a caller of the stack uses. */
async function stackClients(awsEnv: Record<string, string>, outputs: StackOutputs) {
  const config = clientConfig(awsEnv);
  const sqs = new SQSClient(config);
  const lambda = new LambdaClient(config);
  const dynamodb = new DynamoDBClient(config);
  const documents = DynamoDBDocumentClient.from(dynamodb);
  const worker = await lambda.send(
    new GetFunctionConfigurationCommand({ FunctionName: outputs.WorkerFunctionName }),
  );
  const { firstShape } = readLaneSettings(worker.Environment?.Variables ?? {});
  const control = new PipelineControl({
    lambda,
    dynamodb,
    ledgerTable: outputs.LedgerTableName,
    workerFunctionName: outputs.WorkerFunctionName,
    queueArn: outputs.QueueArn,
    ...(firstShape ? { firstShape } : {}),
  });
  return { sqs, lambda, documents, control };
}
